import { format } from 'd3-format';

const si = format('.3~s');

/** A value in its unit, short: 1.23 s, 45 ms, 3.1 MiB, 1.2k. */
export function formatValue(value: number, unit: string): string {
  if (!Number.isFinite(value)) return String(value);
  if (unit === 'seconds') return formatSeconds(value);
  if (unit === 'bytes') return formatBytes(value);
  if (unit === 'count') return Math.abs(value) < 1000 ? format(',.4~')(value) : si(value);
  return `${si(value)} ${unit}`;
}

export function formatSeconds(s: number): string {
  const a = Math.abs(s);
  if (a === 0) return '0 s';
  if (a >= 3600) return `${(s / 3600).toFixed(1)} h`;
  if (a >= 60) return `${(s / 60).toFixed(1)} min`;
  if (a >= 1) return `${s.toFixed(2)} s`;
  if (a >= 1e-3) return `${(s * 1e3).toFixed(1)} ms`;
  return `${(s * 1e6).toFixed(0)} µs`;
}

/** Binary units, as IEC writes them (KiB, not kiB). */
export const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function formatBytes(b: number): string {
  const units = BYTE_UNITS;
  let v = b;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${Math.round(v)} B` : `${v.toFixed(v >= 100 ? 0 : 1)} ${units[i]}`;
}

export function formatPercent(share: number): string {
  return `${(share * 100).toFixed(share < 0.1 ? 1 : 0)}%`;
}

/** Axis ticks for bytes from 0 to at least ``max``: round numbers of one binary unit
 * (0, 100, 200 MiB, not 477, 954 MiB), the last at or above ``max`` so the top of
 * the data has a label. Labels keep the step's precision and no more. */
export function byteTicks(max: number, count = 4): { values: number[]; labels: string[]; top: number } {
  const top = Math.max(max, 1);
  let k = 0;
  while (top / 1024 ** k >= 1024 && k < BYTE_UNITS.length - 1) k++;
  const unit = 1024 ** k;
  const scaled = top / unit;
  const rough = scaled / Math.max(count, 1);
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= rough) ?? 10 * power;
  const n = Math.ceil(scaled / step - 1e-9);
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9) + (step / power === 2.5 ? 1 : 0));
  const values: number[] = [];
  const labels: string[] = [];
  for (let i = 0; i <= n; i++) {
    values.push(i * step * unit);
    labels.push(i === 0 ? '0' : `${Number((i * step).toFixed(decimals))} ${BYTE_UNITS[k]}`);
  }
  return { values, labels, top: n * step * unit };
}
