// uppy-s3.cjs uploads files with Uppy's AwsS3 plugin at its defaults (the uppy bundle the
// upload page vendors) in headless Chromium (Debian's, driven with puppeteer-core): it
// opens the upload page, so that the upload runs from chunkup's own origin, chooses the
// files in a file input as a user would, and runs Uppy with @uppy/aws-s3 whose endpoint
// is chunkup, setting nothing else (so files of 100 MiB or less go as one PUT, after
// GET s3/params). It prints [{"name", "uploadURL", "etag"}] for the files uploaded as one
// JSON line on stdout, and exits 1 on failure with the page's console on stderr.
//
// Environment: PAGE_URL (the page), CHROMIUM (the browser binary), PROFILE_DIR (a fresh,
// empty user data directory), ENDPOINT (the direct door's endpoint, relative to the
// page: Uppy asks for s3/params under it), UPPY_BUNDLE (optional: another uppy bundle
// to load into the page instead of the page's, e.g. Uppy 6's dist/uppy.min.js; its
// @uppy/aws-s3 takes companionEndpoint, and POSTs a form to the URL params answers),
// MULTIPART (optional: "1" sets shouldUseMultipart: true, so every file is a multipart
// upload whose parts go straight to S3). Arguments: the files.
'use strict'

const { launch } = require('./chromium.cjs')

async function main () {
  const files = process.argv.slice(2)
  const browser = await launch()
  try {
    const page = await browser.newPage()
    page.on('console', m => process.stderr.write('page console: ' + m.text() + '\n'))
    page.on('pageerror', e => process.stderr.write('page error: ' + e.message + '\n'))
    const bundle = process.env.UPPY_BUNDLE || ''
    // The page's CSP admits its own scripts only; a test loads another Uppy.
    if (bundle) await page.setBypassCSP(true)
    await page.goto(process.env.PAGE_URL, { waitUntil: 'load' })
    if (bundle) {
      await page.evaluate(() => { delete window.Uppy })
      await page.addScriptTag({ path: bundle })
    }
    await page.evaluate(() => {
      const input = document.createElement('input')
      input.type = 'file'
      input.multiple = true
      input.id = 'uppy-s3-files'
      document.body.append(input)
    })
    const input = await page.$('#uppy-s3-files')
    await input.uploadFile(...files)
    const result = await page.evaluate(async (endpoint, companion, multipart) => {
      const uppy = new Uppy.Uppy()
      const url = new URL(endpoint, location.href).href
      // Uppy 6 asks for s3/params under companionEndpoint, which has no slash of its own.
      const opts = companion ? { companionEndpoint: url.replace(/\/+$/, '') } : { endpoint: url }
      if (multipart) opts.shouldUseMultipart = true
      uppy.use(Uppy.AwsS3, opts)
      for (const f of document.getElementById('uppy-s3-files').files) {
        uppy.addFile({ name: f.name, type: f.type || 'application/octet-stream', data: f, source: 'uppy-s3.cjs' })
      }
      const res = await uppy.upload()
      return {
        successful: res.successful.map(f => ({ name: f.name, uploadURL: f.uploadURL || '', etag: (f.response && f.response.body && f.response.body.ETag) || '' })),
        failed: res.failed.map(f => f.name + ': ' + String(f.error))
      }
    }, process.env.ENDPOINT, bundle !== '', process.env.MULTIPART === '1')
    if (result.failed.length > 0 || result.successful.length !== files.length) {
      process.stderr.write('failed: ' + JSON.stringify(result.failed) + '\n')
      process.exitCode = 1
    }
    process.stdout.write(JSON.stringify(result.successful) + '\n')
  } finally {
    await browser.close()
  }
}

main().catch(err => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + '\n')
  process.exit(1)
})
