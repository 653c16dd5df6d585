// The renderer library's public face for other front-ends (the JupyterLab panels):
// the store that rebuilds the kernel's data from its messages, and the views.
export { mount, type Binding, type Kind, type Mounted } from './mount';
export { Store } from './store';
export { memoryView, type MemorySection, type MemoryViewOptions } from './reportCharts';
export { formatBytes, formatSeconds } from './format';
export type { Buffer, Part, UpdateMessage } from './types';
export { WorkerTableView, type WorkerRow } from './workerTable';
export { CompareView, comparePanels, type CompareData, type RunChoice } from './compare';
