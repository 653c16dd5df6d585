// The anywidget front-end of every live widget (kernel_cluster/jupyter/widgets.py).
// Only the default export: anywidget takes a named `render` export for the old
// single-function form and would then skip initialize().
//
// initialize() runs once per model: it creates the model's store, feeds it the
// kernel's update messages and asks the kernel for the full state. render() runs
// per view and draws from that store, so a second view is complete at once.
import type { AnyWidget } from '@anywidget/types';
import { mount, type Binding, type Kind } from './mount';
import { Store } from './store';
import type { Buffer, UpdateMessage, WidgetModel } from './types';

// Keyed by the widget's `_uid` trait: anywidget may hand initialize() and render()
// different wrappers of the same model, so the wrapper cannot be the key.
const stores = new Map<unknown, Store>();

function storeKey(model: WidgetModel): unknown {
  return model.get('_uid') || model;
}

export function storeFor(model: WidgetModel): Store {
  const key = storeKey(model);
  let store = stores.get(key);
  if (!store) {
    store = new Store();
    stores.set(key, store);
  }
  return store;
}

function isUpdate(msg: unknown): msg is UpdateMessage {
  return (
    typeof msg === 'object' &&
    msg !== null &&
    (msg as UpdateMessage).type === 'update' &&
    Array.isArray((msg as UpdateMessage).parts)
  );
}

export function modelBinding(model: WidgetModel): Binding {
  return {
    get: (name) => model.get(name),
    set(values) {
      for (const [k, v] of Object.entries(values)) model.set(k, v);
      model.save_changes();
    },
    onChange(names, listener) {
      const events = names.map((n) => `change:${n}`);
      for (const e of events) model.on(e, listener);
      return () => {
        for (const e of events) model.off(e, listener);
      };
    },
  };
}

// Both take only what they use of anywidget's props (a test passes just those);
// `satisfies AnyWidget` below checks them against anywidget's contract.
function initialize({ model }: { model: WidgetModel }): () => void {
  const store = storeFor(model);
  let asked = false;
  const onMessage = (msg: unknown, buffers: Buffer[] = []) => {
    if (!isUpdate(msg)) return;
    store.applyUpdate(msg.parts, buffers);
    if (store.stale && !asked) {
      asked = true; // once until a full state arrives
      model.send({ type: 'refresh' });
    } else if (!store.stale) asked = false;
  };
  model.on('msg:custom', onMessage);
  model.send({ type: 'refresh' });
  return () => {
    model.off('msg:custom', onMessage);
    stores.delete(storeKey(model)); // the model is gone: so is what it held
  };
}

function render({ model, el }: { model: WidgetModel; el: HTMLElement }): () => void {
  const store = storeFor(model);
  el.classList.add('kc-widget');
  const mounted = mount(model.get('kind') as Kind, el, store, modelBinding(model));
  return () => mounted.destroy();
}

export default { initialize, render } satisfies AnyWidget;
