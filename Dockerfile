# syntax=docker/dockerfile:1

# Build: a static chunkup binary.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/chunkup ./cmd/chunkup

# Run: Debian slim with Tesseract (English) and poppler's pdftoppm, so OCR works out
# of the box (`chunkup serve` has --ocr on). More languages: add their packages to
# EXTRA_PACKAGES (e.g. tesseract-ocr-deu) and set CHUNKUP_TESSERACT_LANG=eng+deu.
FROM debian:trixie-slim
ARG EXTRA_PACKAGES=""
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
       tesseract-ocr tesseract-ocr-eng poppler-utils ${EXTRA_PACKAGES} \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 65532 --user-group --no-create-home chunkup
COPY --from=build /out/chunkup /usr/local/bin/chunkup
USER 65532:65532
EXPOSE 7070 7071
ENTRYPOINT ["/usr/local/bin/chunkup"]
CMD ["serve"]
