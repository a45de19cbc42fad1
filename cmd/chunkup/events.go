package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/chunkup/chunkup/events"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// eventLine is how `chunkup events` prints one event.
type eventLine struct {
	Type          string          `json:"type"`
	EventID       string          `json:"event_id"`
	CorrelationID string          `json:"correlation_id,omitempty"`
	Key           string          `json:"key"`
	Partition     int             `json:"partition"`
	Offset        int64           `json:"offset"`
	Event         json.RawMessage `json:"event"`
}

func eventsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("events", "events [flags]")
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", "CHUNKUP_KAFKA_BROKERS", "", "Kafka bootstrap brokers, comma-separated")
	topic := fs.String("topic", "CHUNKUP_KAFKA_TOPIC", "chunkup.uploads", "topic to read")
	group := fs.String("group", "CHUNKUP_EVENTS_GROUP", "chunkup-events", "consumer group (offsets are committed, so a restart goes on where it stopped)")
	count := fs.Int("count", "", 0, "exit after this many events (0: run until interrupted)")
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	if *brokers == "" {
		return usageError{errors.New("events needs --brokers (or $CHUNKUP_KAFKA_BROKERS)")}
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: strings.Split(*brokers, ","), Topic: *topic, GroupID: *group,
		StartOffset: kafka.FirstOffset, MaxWait: 500 * time.Millisecond, CommitInterval: 0,
	})
	defer r.Close()
	enc := json.NewEncoder(stdout)
	for n := 0; *count == 0 || n < *count; n++ {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted
			}
			return fmt.Errorf("read events from %s: %w", *brokers, err)
		}
		h := events.HeadersOf(m.Headers)
		line := eventLine{Type: h.Type, EventID: h.ID, CorrelationID: h.CorrelationID,
			Key: string(m.Key), Partition: m.Partition, Offset: m.Offset, Event: m.Value}
		if !json.Valid(m.Value) {
			line.Event, _ = json.Marshal(string(m.Value))
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
		if err := r.CommitMessages(ctx, m); err != nil && ctx.Err() == nil {
			return fmt.Errorf("commit offset: %w", err)
		}
	}
	return nil
}

func watch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("watch", "watch [flags] UPLOAD_ID")
	fs.SetOutput(stderr)
	server, asJSON := clientFlags(fs)
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("watch needs exactly one UPLOAD_ID")}
	}
	c, err := fs.dial(*server)
	if err != nil {
		return err
	}
	defer c.Close()
	var printErr error
	last, err := c.Watch(ctx, fs.Arg(0), func(p *chunkupv1.UploadProgress) {
		if printErr == nil {
			printErr = printProgress(stdout, p, *asJSON)
		}
	})
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	if printErr != nil {
		return printErr
	}
	if last.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		return fmt.Errorf("upload %s ended %s: %s", last.UploadId, stateName(last.State), last.Error)
	}
	return nil
}

func stateName(s chunkupv1.UploadState) string {
	return strings.TrimPrefix(s.String(), "UPLOAD_STATE_")
}

func printProgress(w io.Writer, p *chunkupv1.UploadProgress, asJSON bool) error {
	if asJSON {
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(p)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	total := "?"
	if p.TotalChunks > 0 {
		total = fmt.Sprint(p.TotalChunks)
	}
	_, err := fmt.Fprintf(w, "%s %-10s received %d/%s chunks (%d bytes), uploaded %d (%d bytes) %5.1f%%\n",
		p.UploadId, stateName(p.State), p.ReceivedChunks, total, p.ReceivedBytes, p.UploadedChunks, p.UploadedBytes, p.Percent)
	return err
}
