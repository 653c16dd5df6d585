import { beforeEach, describe, expect, it } from 'vitest';
import widget from '../src/widget';
import { bars, MockModel, workload } from './helpers';

const TRAITS = { _uid: '', kind: 'fine-metrics', unit: 'seconds', span_filter: '', hidden_functions: [], hidden_activities: [], selected: '' };

beforeEach(() => document.body.replaceChildren());

function view(model: MockModel): [HTMLDivElement, () => void] {
  const el = document.createElement('div');
  document.body.append(el);
  return [el, widget.render({ model, el })];
}

describe('anywidget front-end', () => {
  it('asks for the full state once listening, then applies updates', () => {
    const model = new MockModel(TRAITS);
    const stop = widget.initialize({ model });
    expect(model.sent).toEqual([{ type: 'refresh' }]);
    const [el] = view(model);
    expect(el.querySelector('.kc-empty')).not.toBeNull();
    const w = workload();
    model.receive([w.metrics[0], w.spans], w.metrics[1]);
    expect(bars(el, 'by-function').length).toBe(4);
    stop();
    expect(model.listeners()).toBe(4); // the view's trait listeners remain
  });

  it('gives a second view the full current state at once', () => {
    const model = new MockModel(TRAITS);
    widget.initialize({ model });
    const w = workload();
    model.receive([w.metrics[0], w.spans], w.metrics[1]);
    const [first, cleanup] = view(model);
    cleanup();
    expect(first.children.length).toBe(0);
    const [second] = view(model);
    expect(bars(second, 'by-function').length).toBe(4);
  });

  it('keeps filters in the model: the browser filters, the kernel is told', () => {
    const model = new MockModel(TRAITS);
    widget.initialize({ model });
    const w = workload();
    model.receive([w.metrics[0], w.spans], w.metrics[1]);
    const [el] = view(model);
    const unit = el.querySelector('select.kc-unit') as HTMLSelectElement;
    unit.value = 'bytes';
    unit.dispatchEvent(new Event('change'));
    expect(model.get('unit')).toBe('bytes');
    expect(model.saves).toBe(1);
    model.set('span_filter', 'tag:compute'); // from Python, or a linked span tree
    model.set('unit', 'seconds');
    expect(new Set(bars(el, 'by-function').map((b) => b.label))).toEqual(new Set(['sum']));
    const [other] = view(model);
    expect((other.querySelector('select.kc-span') as HTMLSelectElement).value).toBe('tag:compute');
  });

  it('asks again when a message was lost', () => {
    const model = new MockModel(TRAITS);
    widget.initialize({ model });
    const w = workload();
    w.enc.encode([[['execute', 'C', 'sum', 'thread-cpu', 'seconds'], 5]]); // lost
    const [delta, buffers] = w.enc.encode([[['execute', 'C', 'sum', 'thread-cpu', 'seconds'], 6]]);
    model.receive([delta], buffers);
    model.receive([delta], buffers);
    expect(model.sent).toEqual([{ type: 'refresh' }, { type: 'refresh' }]);
    model.emit('msg:custom', { type: 'something else' }, []);
    model.emit('msg:custom', 'not an object', []);
  });

  it('links the span tree to the fine metrics in a dashboard', () => {
    const model = new MockModel({ ...TRAITS, kind: 'dashboard' });
    widget.initialize({ model });
    const w = workload();
    model.receive([w.metrics[0], w.spans, w.progress], w.metrics[1]);
    const [el] = view(model);
    expect(el.querySelectorAll('.kc-progress-row').length).toBe(2);
    (el.querySelector('[data-span="L"]') as HTMLElement).click();
    expect(model.get('selected')).toBe('L');
    expect(model.get('span_filter')).toBe('id:L');
    expect(new Set(bars(el, 'by-function').map((b) => b.label))).toEqual(new Set(['read_csv']));
    expect((el.querySelector('select.kc-span') as HTMLSelectElement).selectedOptions[0].text).toBe('span: pipeline / load');
  });

  it('draws a span tree and progress alone', () => {
    for (const kind of ['span-tree', 'progress']) {
      const model = new MockModel({ ...TRAITS, kind });
      widget.initialize({ model });
      const w = workload();
      model.receive([w.spans, w.progress], []);
      const [el] = view(model);
      expect(el.querySelectorAll(kind === 'span-tree' ? '.kc-tree-row' : '.kc-progress-row').length).toBe(kind === 'span-tree' ? 3 : 2);
      if (kind === 'span-tree') {
        (el.querySelector('[data-span="C"]') as HTMLElement).click();
        expect(model.get('selected')).toBe('C');
      }
    }
  });
});

describe('module shape', () => {
  it('exports render and initialize only by default (a named render makes anywidget skip initialize)', async () => {
    const mod = await import('../src/widget');
    expect(Object.keys(mod)).not.toContain('render');
    expect(Object.keys(mod)).not.toContain('initialize');
    expect(typeof mod.default.initialize).toBe('function');
  });
});

describe('models seen through different wrappers', () => {
  it('shares one store per widget (by _uid) between initialize and render', () => {
    const state = { ...TRAITS, _uid: 'abc123' };
    const a = new MockModel(state);
    const b = new MockModel(state); // another wrapper of the same widget
    b.handlers = a.handlers;
    const stop = widget.initialize({ model: a });
    const w = workload();
    a.receive([w.metrics[0], w.spans], w.metrics[1]);
    const [el] = view(b);
    expect(bars(el, 'by-function').length).toBe(4);
    stop();
    const [fresh] = view(new MockModel(state)); // closed: nothing kept
    expect(bars(fresh, 'by-function').length).toBe(0);
  });
});
