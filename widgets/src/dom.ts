// Small DOM helpers shared by the views.

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'text') node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

/** A tooltip that follows the pointer inside ``root``, on the pointer's left (or
 * above it) where the right (or bottom) edge would cut it off. */
export class Tooltip {
  readonly node: HTMLDivElement;

  constructor(private root: HTMLElement) {
    this.node = h('div', { class: 'kc-tooltip', role: 'tooltip' });
    this.node.style.display = 'none';
    root.append(this.node);
  }

  show(text: string, event: MouseEvent): void {
    this.node.textContent = text;
    this.node.style.display = 'block';
    const box = this.root.getBoundingClientRect();
    const x = event.clientX - box.left;
    const y = event.clientY - box.top;
    // the visible part of the root: a panel scrolls, a notebook output may be clipped
    const right = Math.min(box.width, (typeof window !== 'undefined' ? window.innerWidth : Infinity) - box.left);
    const bottom = Math.min(box.height + 400, (typeof window !== 'undefined' ? window.innerHeight : Infinity) - box.top);
    const w = this.node.offsetWidth;
    const ht = this.node.offsetHeight;
    const left = x + 12 + w > right ? Math.max(0, x - 12 - w) : x + 12;
    const top = y + 12 + ht > bottom ? Math.max(0, y - 12 - ht) : y + 12;
    this.node.style.left = `${left}px`;
    this.node.style.top = `${top}px`;
  }

  hide(): void {
    this.node.style.display = 'none';
  }
}
