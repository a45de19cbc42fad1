// uppy-tus.cjs uploads one file with Uppy's Tus plugin (the uppy bundle the upload page
// vendors) in headless Chromium (Debian's, driven with puppeteer-core): it opens the
// upload page, so that the upload runs from chunkup's own origin, chooses the file in a
// file input as a user would, and runs Uppy with @uppy/tus against the page's tus
// endpoint with the chunk size given. It prints {"uploadURL", "successful", "failed"} as
// one JSON line on stdout, and exits 1 on failure with the page's console on stderr.
//
// Environment: PAGE_URL (the page), CHROMIUM (the browser binary), PROFILE_DIR (a fresh,
// empty user data directory), ENDPOINT (the tus creation URL, relative to the page),
// CHUNK_SIZE (bytes per PATCH). Argument: the file.
'use strict'

const { launch } = require('./chromium.cjs')

async function main () {
  const file = process.argv[2]
  const browser = await launch()
  try {
    const page = await browser.newPage()
    page.on('console', m => process.stderr.write('page console: ' + m.text() + '\n'))
    page.on('pageerror', e => process.stderr.write('page error: ' + e.message + '\n'))
    await page.goto(process.env.PAGE_URL, { waitUntil: 'load' })
    await page.evaluate(() => {
      const input = document.createElement('input')
      input.type = 'file'
      input.id = 'uppy-tus-file'
      document.body.append(input)
    })
    const input = await page.$('#uppy-tus-file')
    await input.uploadFile(file)
    const result = await page.evaluate(async (endpoint, chunkSize) => {
      const f = document.getElementById('uppy-tus-file').files[0]
      const uppy = new Uppy.Uppy()
      uppy.use(Uppy.Tus, { endpoint: new URL(endpoint, location.href).href, chunkSize, retryDelays: [0, 1000, 3000] })
      uppy.addFile({ name: f.name, type: f.type || 'application/octet-stream', data: f, source: 'uppy-tus.cjs' })
      const res = await uppy.upload()
      return {
        uploadURL: res.successful.length === 1 ? res.successful[0].uploadURL : '',
        successful: res.successful.length,
        failed: res.failed.map(x => String(x.error))
      }
    }, process.env.ENDPOINT, Number(process.env.CHUNK_SIZE))
    process.stdout.write(JSON.stringify(result) + '\n')
    if (result.successful !== 1) process.exitCode = 1
  } finally {
    await browser.close()
  }
}

main().catch(err => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + '\n')
  process.exit(1)
})
