// The upload page: every dropped file becomes a tus-js-client upload through the HTTP
// door; its row shows the bytes sent, then the upload's state as chunkup reports it
// (GET on the upload URL returns it as JSON), until the object is stored.
'use strict'

const endpoint = document.body.dataset.endpoint
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

function start (file) {
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
