// Bundles the renderer library for the Python package (kernel_cluster/jupyter/static/):
//   widget.js   ES module for anywidget (export default { initialize, render })
//   report.js   a classic script for the self-contained performance report
//   widget.css  the styles both use
// and, for the JupyterLab extension (labextension/), lib/index.js: the library as
// one ES module (its types come from `tsc -p tsconfig.lib.json`).
// The output is deterministic, so a rebuild with the same lockfile changes nothing.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.env.KC_STATIC_DIR || join(here, '..', 'kernel_cluster', 'jupyter', 'static');
mkdirSync(out, { recursive: true });

const common = {
  bundle: true,
  minify: true,
  legalComments: 'none',
  target: ['es2020'],
  logLevel: 'warning',
};
await build({ ...common, entryPoints: [join(here, 'src', 'widget.ts')], format: 'esm', outfile: join(out, 'widget.js') });
await build({ ...common, entryPoints: [join(here, 'src', 'report.ts')], format: 'iife', outfile: join(out, 'report.js') });
copyFileSync(join(here, 'src', 'styles.css'), join(out, 'widget.css'));
await build({ ...common, minify: false, entryPoints: [join(here, 'src', 'index.ts')], format: 'esm', outfile: join(here, 'lib', 'index.js') });
