// tus-upload.cjs uploads one file to chunkup's HTTP door with tus-js-client in Node, as
// the end-to-end tests drive it (test/e2e/http_test.go). It prints one JSON line on
// stdout per event: {"url"} once the upload's URL is known, {"killed"} just before it
// kills itself, {"done"} on success, {"error"} on failure (exit status 1).
//
// Environment: TUS_FILE (the file), TUS_ENDPOINT (the creation URL) or TUS_UPLOAD_URL
// (an upload to resume: HEAD, then PATCH from its offset), TUS_PROTOCOL (tus-v1,
// ietf-draft-03 or ietf-draft-05), TUS_API_KEY (sent as Authorization: Bearer),
// TUS_CHUNK_SIZE (tus-js-client's chunkSize: one PATCH per that many bytes; unset: one
// PATCH for the whole file, its default), TUS_PARALLEL (tus-js-client's parallelUploads:
// that many partial uploads at once, concatenated by a final one), TUS_KILL_AT (the request that carries the file's byte at this offset sends the bytes
// before it, and once they are written to the connection the process sends itself
// SIGKILL: an interruption in the middle of a request, as a crash or a closed laptop
// makes, at a place that does not depend on timing).
'use strict'

const fs = require('fs')
const http = require('http')
const path = require('path')
const tus = require('tus-js-client')

const env = process.env
const file = fs.readFileSync(env.TUS_FILE)
const killAt = Number(env.TUS_KILL_AT || 0)

function emit (o) { process.stdout.write(JSON.stringify(o) + '\n') }

// KillingStack is tus-js-client's own Node HTTP stack, but for the request whose body
// holds byte killAt of the file: that one it sends itself, up to that byte, and dies.
// (tus-js-client reports progress at most every 100 ms, too coarse to interrupt a fast
// loopback upload at a known place.)
class KillingStack {
  constructor () { this.inner = new tus.DefaultHttpStack() }
  getName () { return 'KillingStack' }
  createRequest (method, url) {
    const req = this.inner.createRequest(method, url)
    const headers = {}
    const setHeader = req.setHeader.bind(req)
    req.setHeader = (k, v) => { headers[k] = v; setHeader(k, v) }
    const send = req.send.bind(req)
    req.send = body => {
      const offset = Number(headers['Upload-Offset'] || 0)
      if (!body || !body.length || offset > killAt || offset + body.length <= killAt) return send(body)
      return new Promise(() => {
        const u = new URL(url)
        const r = http.request({ method, hostname: u.hostname, port: u.port, path: u.pathname, headers: { ...headers, 'Content-Length': body.length } })
        r.on('error', () => {})
        r.write(body.subarray(0, killAt - offset), () => {
          emit({ killed: killAt })
          process.kill(process.pid, 'SIGKILL')
        })
      })
    }
    return req
  }
}

const options = {
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
  onSuccess () {
    emit({ done: upload.url })
    process.exit(0)
  },
  onError (err) {
    emit({ error: String(err && err.message ? err.message : err) })
    process.exit(1)
  }
}
// (An option set to undefined would replace tus-js-client's default.)
if (killAt > 0) options.httpStack = new KillingStack()
if (env.TUS_CHUNK_SIZE) options.chunkSize = Number(env.TUS_CHUNK_SIZE)
if (env.TUS_PARALLEL) options.parallelUploads = Number(env.TUS_PARALLEL)
const upload = new tus.Upload(file, options)
upload.start()
