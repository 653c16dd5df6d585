// The renderer library's modules import one another without circles (type-only
// imports included): a circle makes the order modules initialise in depend on which
// one is imported first, and shows two modules that are one job, or share a third.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const src = join(dirname(fileURLToPath(import.meta.url)), '..', 'src');

/** Each module's local imports, by module name (file name without '.ts'). */
function graph(): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const file of readdirSync(src).filter((f) => f.endsWith('.ts'))) {
    const text = readFileSync(join(src, file), 'utf8');
    const deps = [...text.matchAll(/^(?:import|export)\b[^;]*?\bfrom\s+'\.\/([\w.-]+)'/gms)].map((m) => m[1]);
    out.set(file.slice(0, -3), deps);
  }
  return out;
}

/** Every circle found by a depth-first walk, as the path that closes it. */
function circles(g: Map<string, string[]>): string[][] {
  const found: string[][] = [];
  const done = new Set<string>();
  const walk = (node: string, path: string[]) => {
    const at = path.indexOf(node);
    if (at >= 0) {
      found.push([...path.slice(at), node]);
      return;
    }
    if (done.has(node)) return;
    for (const dep of g.get(node) ?? []) walk(dep, [...path, node]);
    done.add(node);
  };
  for (const node of g.keys()) walk(node, []);
  return found;
}

describe('module imports', () => {
  it('reads the imports', () => {
    const g = graph();
    expect(g.get('mount')).toContain('profileSources');
    expect(g.get('taskStream')).toContain('taskStreamLayout');
    expect(circles(new Map([['a', ['b']], ['b', ['a']]]))).toEqual([['a', 'b', 'a']]);
  });

  it('has no circles', () => {
    expect(circles(graph())).toEqual([]);
  });
});
