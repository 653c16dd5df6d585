// Where a flame graph gets its profile: a live widget's store and synced traits
// (the kernel reads the profile of the prefix and window chosen), or the trees a
// static page carries, one per task prefix (no time window there).
import type { ProfileSource } from './flameGraph';
import type { FlatProfile } from './profileData';
import type { Store } from './store';
import type { Binding, ProfileSelection, Timeline } from './types';

function same(a: ProfileSelection, b: ProfileSelection): boolean {
  return (a.prefix ?? null) === (b.prefix ?? null) && (a.start ?? null) === (b.start ?? null) && (a.stop ?? null) === (b.stop ?? null);
}

export function liveProfileSource(store: Store, b: Binding): ProfileSource {
  const wanted = (): ProfileSelection => ({
    prefix: (b.get('prefix') as string) || null,
    start: (b.get('start') as number | null) ?? null,
    stop: (b.get('stop') as number | null) ?? null,
  });
  return {
    windows: true,
    tree: () => store.profile.tree,
    timeline: () => store.profile.timeline,
    interval: () => store.profile.interval,
    selection: wanted,
    pending: () => store.profile.seq === 0 || !same(store.profile.selection, wanted()),
    select(change) {
      const values: Record<string, unknown> = {};
      if ('prefix' in change) values.prefix = change.prefix ?? '';
      if ('start' in change) values.start = change.start ?? null;
      if ('stop' in change) values.stop = change.stop ?? null;
      b.set(values);
    },
    subscribe(listener) {
      const unsubscribe = store.subscribe(listener);
      const unwatch = b.onChange(['prefix', 'start', 'stop'], listener);
      return () => {
        unsubscribe();
        unwatch();
      };
    },
  };
}

export interface StaticProfiles {
  /** Trees by task prefix; '' holds every task's. */
  trees: Record<string, FlatProfile>;
  timeline: Timeline;
  interval: number;
}

export function staticProfileSource(data: StaticProfiles): ProfileSource {
  let prefix: string | null = null;
  const listeners = new Set<() => void>();
  return {
    windows: false,
    tree: () => data.trees[prefix ?? ''] ?? null,
    timeline: () => data.timeline,
    interval: () => data.interval,
    selection: () => ({ prefix, start: null, stop: null }),
    pending: () => false,
    select(change) {
      if (!('prefix' in change)) return;
      prefix = change.prefix || null;
      for (const l of [...listeners]) l();
    },
    subscribe(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
}
