// page-upload.cjs opens chunkup dev's upload page in headless Chromium (Debian's, driven
// with puppeteer-core; no browser is downloaded), chooses the files given as arguments
// in the page's file input, as a user who clicks "Drop files here" does, and waits
// until every file's row says COMPLETED. It prints the rows as one JSON line on stdout:
// [{"name", "id", "key", "state"}], and exits 1 on failure with the page's console on
// stderr.
//
// Environment: PAGE_URL (the page), CHROMIUM (the browser binary), PROFILE_DIR (a
// fresh, empty user data directory), PROTOCOL (optional: the value to choose in the
// page's protocol selector first, e.g. "direct"), INTEROP_FILE (optional: where to
// write, one a line, the Upload-Draft-Interop-Version of every request the page sent
// that had one), ABORT_FIRST (optional: a method, e.g. PATCH: the first request the
// page sends with it fails as a dropped connection would, once). Arguments: the files.
'use strict'

const { launch } = require('./chromium.cjs')

async function main () {
  const files = process.argv.slice(2)
  const browser = await launch()
  try {
    const page = await browser.newPage()
    page.on('console', m => process.stderr.write('page console: ' + m.text() + '\n'))
    page.on('pageerror', e => process.stderr.write('page error: ' + e.message + '\n'))
    const interop = []
    let toAbort = process.env.ABORT_FIRST || ''
    if (toAbort) await page.setRequestInterception(true)
    page.on('request', req => {
      const v = req.headers()['upload-draft-interop-version']
      if (v !== undefined) interop.push(req.method() + ' ' + v)
      if (!toAbort) {
        if (process.env.ABORT_FIRST) req.continue()
        return
      }
      if (req.method() === toAbort) {
        toAbort = ''
        req.abort('connectionreset')
        return
      }
      req.continue()
    })
    await page.goto(process.env.PAGE_URL, { waitUntil: 'load' })
    if (process.env.PROTOCOL) {
      const chosen = await page.select('#protocol', process.env.PROTOCOL)
      if (chosen.length !== 1) throw new Error('the page offers no protocol ' + process.env.PROTOCOL)
    }
    const input = await page.$('#files')
    await input.uploadFile(...files)
    await page.waitForFunction(n => {
      const states = [...document.querySelectorAll('#uploads tr')].map(tr => tr.cells[2].textContent)
      if (states.some(s => s === 'error' || s === 'FAILED' || s === 'ABORTED' || s === 'EXPIRED')) return true
      return states.length === n && states.every(s => s === 'COMPLETED')
    }, { timeout: 120000, polling: 100 }, files.length)
    const rows = await page.$$eval('#uploads tr', trs => trs.map(tr => {
      const codes = tr.querySelectorAll('code')
      return {
        name: tr.cells[0].textContent,
        state: tr.cells[2].textContent,
        detail: tr.cells[1].textContent,
        id: codes[0] ? codes[0].textContent : '',
        key: codes[1] ? codes[1].textContent : ''
      }
    }))
    if (process.env.INTEROP_FILE) require('fs').writeFileSync(process.env.INTEROP_FILE, interop.join('\n') + '\n')
    process.stdout.write(JSON.stringify(rows) + '\n')
  } finally {
    await browser.close()
  }
}

main().catch(err => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + '\n')
  process.exit(1)
})
