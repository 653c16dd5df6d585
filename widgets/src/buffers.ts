// Binary buffers as the transports hand them over, as ArrayBuffers typed arrays can view.
import type { Buffer } from './types';

export function toArrayBuffer(b: Buffer): ArrayBuffer {
  if (b instanceof ArrayBuffer) return b;
  const view = b as ArrayBufferView;
  // a copy: typed arrays need an aligned offset, which a view into a message may lack
  return view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength) as ArrayBuffer;
}

