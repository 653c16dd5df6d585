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

/** A tooltip that follows the pointer inside ``root``. */
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
    this.node.style.left = `${event.clientX - box.left + 12}px`;
    this.node.style.top = `${event.clientY - box.top + 12}px`;
  }

  hide(): void {
    this.node.style.display = 'none';
  }
}
