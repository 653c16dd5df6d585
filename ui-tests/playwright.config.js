// Browser tests in Debian's Chromium (never a downloaded browser), offline.
// One JupyterLab server for the run, from the project's virtual environment.
const path = require('path');
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

const venv = process.env.KC_VENV || path.resolve(__dirname, '..', '.venv');
// another port when 8888 is taken (a shared machine: several checkouts test at once)
const port = process.env.KC_LAB_PORT || '8888';

module.exports = {
  ...baseConfig,
  timeout: 120000,
  reporter: [['list'], ['html', { open: 'never', outputFolder: 'playwright-report' }]],
  workers: 1,
  retries: 0,
  outputDir: 'test-results',
  use: {
    ...baseConfig.use,
    baseURL: `http://localhost:${port}`,
    video: 'off',
    trace: 'retain-on-failure',
    screenshot: 'only-on-failure',
    viewport: { width: 1280, height: 1600 },
    launchOptions: {
      executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      args: [
        '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-quic',
        '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync',
      ],
    },
  },
  webServer: {
    command: `${path.join(venv, 'bin', 'jupyter')} lab --config jupyter_server_test_config.py`,
    url: `http://localhost:${port}/lab`,
    // the notebooks' kernels record no run history in the user's data directory
    // (a test that needs one gives its own file)
    env: { ...process.env, KERNEL_CLUSTER_HISTORY: 'off' },
    timeout: 120000,
    reuseExistingServer: false,
  },
};
