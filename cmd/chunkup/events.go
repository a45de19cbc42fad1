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
	fs.notes = append(fs.notes, `A broker must answer within 1s, or the command fails at once (exit 1) and says that
it cannot reach Kafka. Once connected, the reader retries until interrupted.`)
	brokers := fs.String("brokers", "CHUNKUP_KAFKA_BROKERS", "127.0.0.1:7073", "Kafka bootstrap brokers, comma-separated (default: chunkup dev's)")
	topic := fs.String("topic", "CHUNKUP_KAFKA_TOPIC", "chunkup.uploads", "topic to read")
	group := fs.String("group", "CHUNKUP_EVENTS_GROUP", "chunkup-events", "consumer group (offsets are committed, so a restart goes on where it stopped)")
	count := fs.Int("count", "", 0, "exit after this many events (0: run until interrupted)")
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	var addrs []string
	for b := range strings.SplitSeq(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			addrs = append(addrs, b)
		}
	}
	if len(addrs) == 0 {
		return usageError{errors.New("events needs --brokers (or $CHUNKUP_KAFKA_BROKERS)")}
	}
	if err := reachKafka(ctx, addrs); err != nil {
		return err
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: addrs, Topic: *topic, GroupID: *group,
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

// reachKafka checks that one of the brokers answers within connectTimeout: kafka-go's
// reader would retry an unreachable broker silently forever.
func reachKafka(ctx context.Context, brokers []string) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var errs []string
	deadline, _ := ctx.Deadline()
	for _, b := range brokers {
		conn, err := kafka.DialContext(ctx, "tcp", b)
		if err == nil {
			// A connection is not an answer: ask the broker something.
			if err = conn.SetDeadline(deadline); err == nil {
				_, err = conn.ApiVersions()
			}
			conn.Close()
		}
		if err == nil {
			return nil
		}
		errs = append(errs, err.Error())
	}
	return fmt.Errorf("cannot reach Kafka at %s (%s); check --brokers or $CHUNKUP_KAFKA_BROKERS, or start a broker with `chunkup dev`",
		strings.Join(brokers, ","), strings.Join(errs, "; "))
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
	c, err := fs.dial(ctx, *server)
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
		return printProto(w, p)
	}
	total := "?"
	if p.TotalChunks > 0 {
		total = fmt.Sprint(p.TotalChunks)
	}
	_, err := fmt.Fprintf(w, "%s %-10s received %d/%s chunks (%d bytes), uploaded %d (%d bytes) %5.1f%%\n",
		p.UploadId, stateName(p.State), p.ReceivedChunks, total, p.ReceivedBytes, p.UploadedChunks, p.UploadedBytes, p.Percent)
	return err
}
