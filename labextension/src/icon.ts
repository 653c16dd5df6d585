import { LabIcon } from '@jupyterlab/ui-components';

// Three workers around a scheduler; `jp-icon3` takes the theme's icon colour.
const svgstr = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
<g class="jp-icon3" fill="#616161"><circle cx="12" cy="12" r="3.2"/><circle cx="4.5" cy="5" r="2.4"/>
<circle cx="19.5" cy="5" r="2.4"/><circle cx="12" cy="20.5" r="2.4"/></g>
<g class="jp-icon3" stroke="#616161" stroke-width="1.4" fill="none"><path d="M6.3 6.6 9.6 10M17.7 6.6 14.4 10M12 15.2v3"/></g>
</svg>`;

export const clusterIcon = new LabIcon({ name: 'kernel-cluster:cluster', svgstr });
