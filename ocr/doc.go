// Package ocr runs chunkup's OCR pipeline: completed image and PDF uploads become
// documents, each handed to a Redis-backed job queue (at least once, leased, retried with
// backoff, dead-lettered, one job per document unless forced); workers download the
// object from S3, check its bytes against its declared type, run an Engine (Tesseract by
// default), store the result beside the object, evaluate it against a rule set and move
// the document through its status flow, every transition with an event in the upload's
// outbox. A webhook records external reviewers' decisions.
//
// The keyspace and scripts live in staging (jobs.go, documents.go); this package uses
// them through the narrow interfaces it declares. See docs/ocr.md.
package ocr
