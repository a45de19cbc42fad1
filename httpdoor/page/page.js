// The upload page: every dropped file becomes a tus-js-client upload through the HTTP
// door, or with "direct to S3" an Uppy AwsS3 upload whose parts go straight to S3 with
// URLs the direct door signs; its row shows the bytes sent, then the upload's state as
// chunkup reports it (GET on the HTTP door's upload URL returns it as JSON, for a
// direct upload too), until the object is stored.
'use strict'

const endpoint = document.body.dataset.endpoint
// Where Uppy's AwsS3 finds Companion's routes (it asks for s3/multipart under it): the
// page's origin and the direct door's prefix less its s3/; empty when off.
const directBase = document.body.dataset.direct ? location.origin + document.body.dataset.direct.replace(/\/$/, '') : ''
// S3's smallest part but the last: Uppy's AwsS3 parts of this size.
const partSize = 5 * 1024 * 1024
const table = document.getElementById('uploads')
const drop = document.getElementById('drop')
const picker = document.getElementById('files')
const keyInput = document.getElementById('key')
const protocolSelect = document.getElementById('protocol')

keyInput.value = localStorage.getItem('chunkup-key') || ''
keyInput.addEventListener('change', () => localStorage.setItem('chunkup-key', keyInput.value))

function authHeaders () {
  const key = keyInput.value.trim()
  return key ? { Authorization: 'Bearer ' + key } : {}
}

function el (tag, cls, text) {
  const e = document.createElement(tag)
  if (cls) e.className = cls
  if (text !== undefined) e.textContent = text
  return e
}

function mib (n) { return (n / 1048576).toFixed(1) + ' MiB' }

// addRow makes a file's row and returns the functions that update it.
function addRow (file) {
  const tr = el('tr')
  const name = el('td', 'name', file.name)
  const bar = el('progress')
  bar.max = file.size || 1
  bar.value = 0
  const barCell = el('td')
  const detail = el('div', 'small', 'starting…')
  barCell.append(bar, detail)
  const state = el('td', '', '')
  const ids = el('td', 'small', '')
  tr.append(name, barCell, state, ids)
  table.append(tr)
  return {
    progress (sent, total) {
      bar.max = total || 1
      bar.value = sent
      detail.textContent = mib(sent) + ' / ' + mib(total) + ' sent'
    },
    show (up) {
      state.textContent = up.state
      state.className = 'state-' + up.state
      ids.textContent = ''
      ids.append('id ', el('code', '', up.id))
      if (up.key) ids.append(el('br'), 'key ', el('code', '', up.key))
      detail.textContent = mib(up.offset) + ' received, ' + up.received_chunks + ' chunks, ' +
        up.stored_chunks + ' stored' + (up.reason ? ' — ' + up.reason : '')
    },
    error (msg) {
      state.textContent = 'error'
      state.className = 'error'
      detail.textContent = msg
    }
  }
}

// watch polls the upload's state until it ends.
async function watch (url, row) {
  for (;;) {
    try {
      const res = await fetch(url, { headers: authHeaders(), cache: 'no-store' })
      if (res.ok) {
        const up = await res.json()
        row.show(up)
        if (['COMPLETED', 'FAILED', 'ABORTED', 'EXPIRED'].includes(up.state)) return
      } else if (res.status === 404 || res.status === 410) {
        row.error('upload ' + (res.status === 404 ? 'not found' : 'ended'))
        return
      }
    } catch (e) { /* offline for a moment: poll again */ }
    await new Promise(resolve => setTimeout(resolve, 1000))
  }
}

// startDirect uploads file with Uppy's AwsS3 plugin through the direct door: it creates
// the upload (POST s3/multipart), has each 5 MiB part signed and PUTs it to S3, then
// completes it; chunkup checks the parts S3 holds and completes the object. Multipart
// always, even for a file of one part: Uppy's single PUT (GET s3/params) goes through
// chunkup (after it the client never calls back), and this choice is straight to S3.
function startDirect (file) {
  const row = addRow(file)
  const uppy = new Uppy.Uppy({ autoProceed: true })
  uppy.use(Uppy.AwsS3, {
    endpoint: directBase,
    headers: authHeaders(),
    shouldUseMultipart: () => true,
    getChunkSize: () => partSize,
    retryDelays: [0, 1000, 3000, 5000, 10000]
  })
  let watching = false
  const watchOnce = f => {
    const id = f && f.s3Multipart && f.s3Multipart.uploadId
    if (id && !watching) {
      watching = true
      watch(endpoint + id, row)
    }
  }
  uppy.on('upload-progress', (f, p) => {
    row.progress(p.bytesUploaded, p.bytesTotal)
    watchOnce(uppy.getFile(f.id))
  })
  uppy.on('upload-success', f => {
    row.progress(file.size, file.size)
    watchOnce(uppy.getFile(f.id))
  })
  uppy.on('upload-error', (f, err) => row.error(String(err && err.message ? err.message : err)))
  uppy.addFile({ name: file.name, type: file.type || 'application/octet-stream', data: file, source: 'page' })
}

// The IETF resumable upload draft -13 (interop version 10), which tus-js-client 4.3.1
// cannot send: a small client of its own. Creation is a POST with the first piece
// (Upload-Complete ?1 when that is the whole file), each further piece a PATCH at the
// upload's offset (Content-Type application/partial-upload), the last with
// Upload-Complete ?1. The upload URL is kept in localStorage by the file's name, size
// and date, so that dropping the same file again resumes it: HEAD gives the offset.
const ietfInterop = '10'
const ietfPiece = 16 * 1024 * 1024

function b64 (s) {
  let bin = ''
  for (const byte of new TextEncoder().encode(s)) bin += String.fromCharCode(byte)
  return btoa(bin)
}

// ietfSend sends one request with XHR (for upload progress) and resolves to it.
function ietfSend (method, url, headers, body, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest()
    xhr.open(method, url)
    for (const [k, v] of Object.entries({ ...authHeaders(), 'Upload-Draft-Interop-Version': ietfInterop, ...headers })) {
      xhr.setRequestHeader(k, v)
    }
    if (onProgress) xhr.upload.onprogress = e => onProgress(e.loaded)
    xhr.onload = () => resolve(xhr)
    xhr.onerror = () => reject(new Error(method + ' ' + url + ': network error'))
    xhr.send(body)
  })
}

function ietfFailed (xhr) {
  let msg = xhr.status + ' ' + xhr.statusText
  try { msg += ': ' + (JSON.parse(xhr.responseText).detail || xhr.responseText) } catch (e) { if (xhr.responseText) msg += ': ' + xhr.responseText }
  return new Error(msg)
}

async function startIETF (file) {
  const row = addRow(file)
  const storeKey = 'chunkup-ietf:' + [file.name, file.size, file.lastModified].join(':')
  let url = localStorage.getItem(storeKey)
  let offset = 0
  let watching = false
  const watchOnce = () => {
    if (!watching) {
      watching = true
      watch(url, row)
    }
  }
  const retries = [0, 1000, 3000, 5000, 10000]
  for (let attempt = 0; ; attempt++) {
    try {
      if (url) {
        // Resume: where is the upload?
        const head = await ietfSend('HEAD', url, {}, null)
        if (head.status === 404 || head.status === 410) {
          localStorage.removeItem(storeKey)
          url = null
          offset = 0
        } else if (head.status >= 200 && head.status < 300) {
          offset = Number(head.getResponseHeader('Upload-Offset'))
          if (head.getResponseHeader('Upload-Complete') === '?1') break
        } else {
          throw ietfFailed(head)
        }
      }
      if (!url) {
        const first = file.slice(0, ietfPiece)
        const whole = first.size === file.size
        const meta = 'filename ' + b64(file.name) + ',filetype ' + b64(file.type || 'application/octet-stream')
        const res = await ietfSend('POST', endpoint, {
          'Upload-Complete': whole ? '?1' : '?0',
          'Upload-Length': String(file.size),
          'Upload-Metadata': meta,
          'Content-Type': 'application/octet-stream'
        }, first, n => row.progress(n, file.size))
        if (res.status !== 201 && res.status !== 200) throw ietfFailed(res)
        url = new URL(res.getResponseHeader('Location'), location.href).href
        localStorage.setItem(storeKey, url)
        watchOnce()
        // A 201 tells how much of the body it took (all of it, or the chunks staged).
        offset = Number(res.getResponseHeader('Upload-Offset') || first.size)
      } else {
        watchOnce()
      }
      while (offset < file.size) {
        const piece = file.slice(offset, offset + ietfPiece)
        const last = offset + piece.size === file.size
        const from = offset
        const res = await ietfSend('PATCH', url, {
          'Upload-Offset': String(offset),
          'Upload-Complete': last ? '?1' : '?0',
          'Content-Type': 'application/partial-upload'
        }, piece, n => row.progress(from + n, file.size))
        if (res.status !== 204 && res.status !== 200) throw ietfFailed(res)
        offset += piece.size
        row.progress(offset, file.size)
      }
      localStorage.removeItem(storeKey)
      return
    } catch (err) {
      if (attempt >= retries.length) {
        row.error(String(err && err.message ? err.message : err))
        return
      }
      await new Promise(resolve => setTimeout(resolve, retries[attempt]))
    }
  }
  // HEAD said the upload is complete: show its state.
  localStorage.removeItem(storeKey)
  watchOnce()
}

function start (file) {
  if (protocolSelect.value === 'direct') return startDirect(file)
  if (protocolSelect.value === 'ietf-draft-13') return startIETF(file)
  const row = addRow(file)
  let watching = false
  const upload = new tus.Upload(file, {
    endpoint,
    protocol: protocolSelect.value,
    retryDelays: [0, 1000, 3000, 5000, 10000],
    metadata: { filename: file.name, filetype: file.type || 'application/octet-stream' },
    headers: authHeaders(),
    removeFingerprintOnSuccess: true,
    onProgress: (sent, total) => row.progress(sent, total),
    onUploadUrlAvailable: () => {
      if (!watching) {
        watching = true
        watch(upload.url, row)
      }
    },
    onSuccess: () => {
      row.progress(file.size, file.size)
      if (!watching) {
        watching = true
        watch(upload.url, row)
      }
    },
    onError: err => row.error(String(err && err.message ? err.message : err))
  })
  // Resume an upload of the same file that an earlier visit left unfinished.
  upload.findPreviousUploads().then(previous => {
    if (previous.length > 0) upload.resumeFromPreviousUpload(previous[0])
    upload.start()
  })
}

function startAll (files) { for (const f of files) start(f) }

drop.addEventListener('click', () => picker.click())
drop.addEventListener('keydown', e => { if (e.key === 'Enter' || e.key === ' ') picker.click() })
picker.addEventListener('change', () => { startAll(picker.files); picker.value = '' })
drop.addEventListener('dragover', e => { e.preventDefault(); drop.classList.add('over') })
drop.addEventListener('dragleave', () => drop.classList.remove('over'))
drop.addEventListener('drop', e => {
  e.preventDefault()
  drop.classList.remove('over')
  startAll(e.dataTransfer.files)
})
