// chromium.cjs launches Debian's headless Chromium for the end-to-end tests' browser
// scripts (page-upload.cjs, uppy-tus.cjs), with puppeteer-core.
//
// Environment: CHROMIUM (the browser binary), PROFILE_DIR (a fresh, empty user data
// directory).
'use strict'

const puppeteer = require('puppeteer-core')

function launch () {
  return puppeteer.launch({
    executablePath: process.env.CHROMIUM,
    // Exactly these flags: no sandbox (tests may run as root), no GPU, no QUIC, and
    // none of the background traffic a fresh profile would start.
    ignoreDefaultArgs: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-dev-shm-usage', '--user-data-dir=' + process.env.PROFILE_DIR, 'about:blank']
  })
}

module.exports = { launch }
