package e2etest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"testing"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/api/apiwire"
)

// JSONLLine is the line the example plugins append for each message (Go
// in examples/custom-transport, Node in examples/node-transport, Python in
// examples/python-transport): the body as a JSON string, or in
// body_base64 when it is not UTF-8.
type JSONLLine struct {
	DeliveryID string `json:"delivery_id"`
	Attempt    int    `json:"attempt"`
	Headers    []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"headers"`
	Body       *string `json:"body"`
	BodyBase64 []byte  `json:"body_base64"`
}

// Header is the line's headers as an http.Header, as a receiver gets them.
func (l JSONLLine) Header() http.Header {
	h := http.Header{}
	for _, hd := range l.Headers {
		h.Add(hd.Name, hd.Value)
	}
	return h
}

// Bytes is the body as sent, from whichever field carries it.
func (l JSONLLine) Bytes() []byte {
	if l.Body != nil {
		return []byte(*l.Body)
	}
	return l.BodyBase64
}

// ReadJSONL parses the file a plugin appends to; a missing file is no
// lines.
func ReadJSONL(t testing.TB, path string) []JSONLLine {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []JSONLLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l JSONLLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %d of %s is not a JSON line: %v: %q", len(lines)+1, path, err, sc.Text())
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// SeqData is the submission SubmitSeq posts: a sequence number, and a note
// with characters a careless encoder would escape or mangle.
type SeqData struct {
	Seq  int    `json:"seq"`
	Note string `json:"note"`
}

// seqNote is every SeqData's note.
const seqNote = "<&> ü"

// SubmitSeq submits n submissions of form, the i-th carrying SeqData{Seq:
// i}, and returns the answers in order. Each must make exactly one
// delivery: form must have one endpoint.
func (s *Server) SubmitSeq(form string, n int) []apiwire.IngestResult {
	s.t.Helper()
	subs := make([]apiwire.IngestResult, n)
	for i := range subs {
		data, err := json.Marshal(SeqData{Seq: i, Note: seqNote})
		if err != nil {
			s.t.Fatal(err)
		}
		if subs[i] = s.Submit(form, string(data)); len(subs[i].Deliveries) != 1 || subs[i].SubmissionID == "" {
			s.t.Fatalf("submission %d to %s: %+v; want a submission id and one delivery", i, form, subs[i])
		}
	}
	return subs
}

// WaitDelivered waits until each submission's delivery is terminal, fails
// the test unless every one is delivered, and returns them by id.
func (s *Server) WaitDelivered(subs []apiwire.IngestResult) map[string]apiwire.DeliveryDetail {
	s.t.Helper()
	out := make(map[string]apiwire.DeliveryDetail, len(subs))
	for _, sub := range subs {
		id := sub.Deliveries[0]
		d := s.WaitDelivery(id, "delivered or failed", Terminal)
		if d.State != apiwire.StateDelivered {
			s.t.Fatalf("delivery %s ended %s after %d attempts %+v (unsent reason %q); want delivered", id, d.State, d.Attempts, d.AttemptHistory, d.UnsentReason)
		}
		out[id] = d
	}
	return out
}

// CheckSeqDelivered holds the lines a plugin appended to what SubmitSeq
// submitted and WaitDelivered saw delivered, as a receiver would check
// them: every line's signature verifies with secret (webhook.Verify), its
// webhook-id is its delivery's id, its body is its submission as
// submitted, and deduplicating on submission.id leaves exactly one line
// per submission. Delivery is at least once, so a delivery may have a line
// for each attempt it made (one written just as its deadline ran out), but
// no more.
func CheckSeqDelivered(t testing.TB, lines []JSONLLine, secret string, subs []apiwire.IngestResult, delivered map[string]apiwire.DeliveryDetail) {
	t.Helper()
	seqOf := make(map[string]int, len(subs)) // by submission id
	for i, sub := range subs {
		seqOf[sub.SubmissionID] = i
	}
	dedupe, err := webhook.NewMemoryDeduper(webhook.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	perDelivery := map[string]int{}
	processed := 0
	for i, l := range lines {
		body := l.Bytes()
		h := l.Header()
		if err := webhook.Verify(h, body, secret); err != nil {
			t.Fatalf("line %d (%s): the signature does not verify with the endpoint's secret: %v", i+1, l.DeliveryID, err)
		}
		var ev webhook.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Fatalf("line %d (%s): the body is not an event: %v: %s", i+1, l.DeliveryID, err, body)
		}
		seq, ok := seqOf[ev.Submission.ID]
		if !ok {
			t.Fatalf("line %d (%s) carries submission %q, not one that was submitted", i+1, l.DeliveryID, ev.Submission.ID)
		}
		if want := subs[seq].Deliveries[0]; l.DeliveryID != want || h.Get(webhook.HeaderID) != want {
			t.Fatalf("line %d: delivery_id %s, webhook-id %s for submission %d; want its delivery %s", i+1, l.DeliveryID, h.Get(webhook.HeaderID), seq, want)
		}
		var data SeqData
		if err := json.Unmarshal(ev.Submission.Data, &data); err != nil || data != (SeqData{Seq: seq, Note: seqNote}) {
			t.Fatalf("line %d: submission %d carries %s (%v); want it as submitted", i+1, seq, ev.Submission.Data, err)
		}
		perDelivery[l.DeliveryID]++
		if _, err := dedupe.Process(context.Background(), ev.Submission.ID, func(context.Context) error {
			processed++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if processed != len(subs) {
		t.Fatalf("deduplicated on submission.id, %d lines are distinct; want %d, one per submission", processed, len(subs))
	}
	for id, n := range perDelivery {
		if d := delivered[id]; n > d.Attempts {
			t.Errorf("delivery %s has %d lines but made %d attempts: a message was written twice by one attempt", id, n, d.Attempts)
		}
	}
	if len(perDelivery) != len(subs) {
		t.Fatalf("%d deliveries have lines; want every one of the %d", len(perDelivery), len(subs))
	}
	t.Logf("%d submissions delivered: %d lines, every signature verified, %d distinct by submission.id", len(subs), len(lines), processed)
}
