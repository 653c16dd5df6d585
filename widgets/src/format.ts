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

export function formatBytes(b: number): string {
  const units = ['B', 'kiB', 'MiB', 'GiB', 'TiB'];
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
