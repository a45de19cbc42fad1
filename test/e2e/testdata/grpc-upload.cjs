// grpc-upload.cjs is a gRPC client of chunkup written from proto/chunkup/v1/upload.proto
// alone, in Node with @grpc/grpc-js and @grpc/proto-loader, as a user of another
// language writes one: no chunkup SDK, only the .proto and its comments. The end-to-end
// tests run it (test/e2e/grpc_node_test.go).
//
// It creates an upload in the first message of an UploadChunk stream, sends every chunk
// but the last and stops (an interrupted client), asks GetUpload which chunks the server
// holds, resumes on a new stream with the rest, sends one chunk with a wrong crc32c
// (which must be DATA_LOSS), watches the upload to COMPLETED, and reads the object back
// with ReadObject, checking each message's offset and CRC32C. It prints one JSON line
// with what it saw; the test checks it.
//
// Environment: CHUNKUP_ADDR (host:port), CHUNKUP_FILE (the file), CHUNKUP_PROTO (the
// proto directory), CHUNKUP_CHUNK (chunk size in bytes).
'use strict'

const fs = require('fs')
const path = require('path')
const grpc = require('@grpc/grpc-js')
const loader = require('@grpc/proto-loader')

const env = process.env
const file = fs.readFileSync(env.CHUNKUP_FILE)
const chunkSize = Number(env.CHUNKUP_CHUNK)

const def = loader.loadSync(path.join(env.CHUNKUP_PROTO, 'chunkup/v1/upload.proto'), {
  includeDirs: [env.CHUNKUP_PROTO], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true
})
const pkg = grpc.loadPackageDefinition(def).chunkup.v1
const api = new pkg.UploadService(env.CHUNKUP_ADDR, grpc.credentials.createInsecure())

// CRC-32C (Castagnoli), as the proto asks for crc32c: reflected polynomial 0x82F63B78.
const table = new Uint32Array(256).map((_, n) => {
  let c = n
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82F63B78 : c >>> 1
  return c >>> 0
})
function crc32c (buf) {
  let c = 0xFFFFFFFF
  for (const b of buf) c = table[(c ^ b) & 0xFF] ^ (c >>> 8)
  return (c ^ 0xFFFFFFFF) >>> 0
}

const unary = (method, req) => new Promise((resolve, reject) =>
  api[method](req, (err, res) => err ? reject(err) : resolve(res)))

// stream sends msgs on one UploadChunk stream, half-closes it, and resolves with every
// response (or rejects with the stream's error).
function stream (msgs) {
  return new Promise((resolve, reject) => {
    const call = api.UploadChunk()
    const got = []
    call.on('data', r => got.push(r))
    call.on('error', reject)
    call.on('end', () => resolve(got))
    for (const m of msgs) call.write(m)
    call.end()
  })
}

function chunk (n) {
  const data = file.subarray((n - 1) * chunkSize, Math.min(n * chunkSize, file.length))
  return { chunk_number: n, data, crc32c: crc32c(data) }
}

async function main () {
  const out = {}
  const total = Math.max(1, Math.ceil(file.length / chunkSize))

  // Create in the first message, then every chunk but the last: the client "dies".
  const first = [{ create: { name: 'from-node.bin', expected_size: String(file.length), chunk_size: String(chunkSize) } }]
  for (let n = 1; n < total; n++) first.push(chunk(n))
  const acks = await stream(first)
  const id = acks[0].upload.upload_id
  out.created_state = acks[0].upload.state
  out.first_acks = acks.slice(1).map(a => a.chunk_number)

  // Resume: ask what the server holds, send the rest on a new stream (the upload id
  // in each message, as a stream that did not create the upload must).
  const held = (await unary('GetUpload', { upload_id: id })).upload
  out.received_before_resume = held.received_chunks
  const rest = []
  for (let n = 1; n <= total; n++) {
    if (!held.received_chunks.includes(n)) rest.push({ upload_id: id, ...chunk(n) })
  }
  const resumed = await stream(rest)
  out.resumed_acks = resumed.map(a => a.chunk_number)

  // A repeat with a wrong crc32c is refused with DATA_LOSS, and changes nothing.
  try {
    await stream([{ upload_id: id, ...chunk(1), crc32c: (chunk(1).crc32c + 1) >>> 0 }])
    out.wrong_crc = 'accepted'
  } catch (err) {
    out.wrong_crc = grpc.status[err.code]
  }

  // Watch until the upload is COMPLETED (the stream ends at a terminal state).
  out.watched = await new Promise((resolve, reject) => {
    const states = []
    const call = api.WatchUpload({ upload_id: id })
    call.on('data', r => states.push(r.progress.state))
    call.on('error', reject)
    call.on('end', () => resolve(states[states.length - 1]))
  })

  // Read the object back, checking each message's offset and CRC32C.
  const parts = []
  out.read_ok = await new Promise((resolve, reject) => {
    let next = 0
    let ok = true
    const call = api.ReadObject({ upload_id: id })
    call.on('data', r => {
      ok = ok && Number(r.offset) === next && crc32c(r.data) === r.crc32c
      next += r.data.length
      parts.push(r.data)
    })
    call.on('error', reject)
    call.on('end', () => resolve(ok))
  })
  out.bytes_equal = Buffer.concat(parts).equals(file)
  out.upload_id = id
  const done = (await unary('GetUpload', { upload_id: id })).upload
  out.state = done.state
  out.crc32c_equal = done.crc32c === crc32c(file)
  process.stdout.write(JSON.stringify(out) + '\n')
}

main().then(() => api.close(), err => {
  process.stdout.write(JSON.stringify({ error: String(err), code: grpc.status[err.code] }) + '\n')
  process.exit(1)
})
