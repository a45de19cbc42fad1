// tus-upload.cjs uploads one file to chunkup's HTTP door with tus-js-client in Node, as
// the end-to-end tests drive it (test/e2e/http_test.go). It prints one JSON line on
// stdout per event: {"url"} once the upload's URL is known, {"killed"} just before it
// kills itself, {"done"} on success, {"error"} on failure (exit status 1).
//
// Environment: TUS_FILE (the file), TUS_ENDPOINT (the creation URL) or TUS_UPLOAD_URL
// (an upload to resume: HEAD, then PATCH from its offset), TUS_PROTOCOL (tus-v1,
// ietf-draft-03 or ietf-draft-05), TUS_API_KEY (sent as Authorization: Bearer),
// TUS_KILL_AT (after this many bytes have been sent, the process sends itself SIGKILL:
// an interruption in the middle of a request, as a crash or a closed laptop makes).
'use strict'

const fs = require('fs')
const path = require('path')
const tus = require('tus-js-client')

const env = process.env
const file = fs.readFileSync(env.TUS_FILE)
const killAt = Number(env.TUS_KILL_AT || 0)

function emit (o) { process.stdout.write(JSON.stringify(o) + '\n') }

const upload = new tus.Upload(file, {
  endpoint: env.TUS_ENDPOINT || null,
  uploadUrl: env.TUS_UPLOAD_URL || null,
  protocol: env.TUS_PROTOCOL || 'tus-v1',
  metadata: { filename: path.basename(env.TUS_FILE), filetype: 'application/octet-stream' },
  headers: env.TUS_API_KEY ? { Authorization: 'Bearer ' + env.TUS_API_KEY } : {},
  // Retries cover a request refused while the one this process interrupts still holds
  // the upload (423/409), until the server has noticed that one is gone.
  retryDelays: [0, 250, 500, 1000, 2000, 4000, 8000],
  storeFingerprintForResuming: false,
  onUploadUrlAvailable () { emit({ url: upload.url }) },
  onProgress (sent) {
    if (killAt > 0 && sent >= killAt) {
      emit({ killed: sent })
      process.kill(process.pid, 'SIGKILL')
    }
  },
  onSuccess () {
    emit({ done: upload.url })
    process.exit(0)
  },
  onError (err) {
    emit({ error: String(err && err.message ? err.message : err) })
    process.exit(1)
  }
})
upload.start()
