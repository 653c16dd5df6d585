// Builds the prebuilt ("federated") extension into kernel_cluster/labextension/ with
// JupyterLab's builder. The builder needs JupyterLab's core package list, which the
// Python jupyterlab package carries (its staging directory): found here through the
// first Python that imports jupyterlab (KC_PYTHON, the project's .venv, python, python3).
import { execFileSync } from 'node:child_process';
import { copyFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const probe = 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))';

function corePath() {
  if (process.env.JUPYTERLAB_STAGING) return process.env.JUPYTERLAB_STAGING;
  const candidates = [process.env.KC_PYTHON, join(here, '..', '.venv', 'bin', 'python'), 'python', 'python3'];
  for (const python of candidates.filter(Boolean)) {
    try {
      return execFileSync(python, ['-c', probe], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    } catch {
      // not there, or no jupyterlab in it: try the next
    }
  }
  throw new Error('Building the JupyterLab extension needs the Python package jupyterlab (>=4.2): ' +
    'install it, or set KC_PYTHON to a Python that has it.');
}

const builder = require.resolve('@jupyterlab/builder/lib/build-labextension.js');
const args = [builder, '--core-path', corePath()];
if (process.argv.includes('--development')) args.push('--development');
execFileSync(process.execPath, [...args, here], { stdio: 'inherit' });
// tells `jupyter labextension list` which Python package brought the extension
copyFileSync(join(here, 'install.json'), join(here, '..', 'kernel_cluster', 'labextension', 'install.json'));
