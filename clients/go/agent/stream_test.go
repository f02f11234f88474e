package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestOutputStreamsTheLogAsItComes(t *testing.T) {
	f := newFake(t)
	next := make(chan struct{})
	gone := make(chan struct{})
	f.handle("/v1/output", func(w http.ResponseWriter, r *http.Request) {
		var req OutputOptions
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !req.Follow {
			t.Errorf("the request: %+v %v", req, err)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Dispatch-Pod", "dj-x-node-0-0-abcde")
		_, _ = w.Write([]byte("step 1 loss 0.9\n"))
		http.NewResponseController(w).Flush()
		<-next // the client has read the first line before the second exists: never buffered whole
		_, _ = w.Write([]byte("step 2 loss 0.5\n"))
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // following until the caller goes
		close(gone)
	})
	c, _ := client(t, f, clientOpts{opts: []Option{WithTimeout(time.Second)}})
	out, err := c.Output(context.Background(), ref, OutputOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if out.Pod != "dj-x-node-0-0-abcde" {
		t.Errorf("pod %q", out.Pod)
	}
	lines := bufio.NewReader(out)
	first, err := lines.ReadString('\n')
	if err != nil || first != "step 1 loss 0.9\n" {
		t.Fatalf("%q %v", first, err)
	}
	close(next)
	time.Sleep(1500 * time.Millisecond) // past the client's timeout: it bounds the headers only
	second, err := lines.ReadString('\n')
	if err != nil || second != "step 2 loss 0.5\n" {
		t.Fatalf("%q %v", second, err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the agent still streams after Close")
	}
}

func TestABrokenOutputStreamIsACutOff(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/output", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("step 1\n"))
		http.NewResponseController(w).Flush()
		conn, _, _ := http.NewResponseController(w).Hijack() // mid-chunk: no terminating chunk
		conn.Close()
	})
	c, _ := client(t, f, clientOpts{})
	out, err := c.Output(context.Background(), ref, OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	got, err := io.ReadAll(out)
	if string(got) != "step 1\n" || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("%q %v", got, err)
	}
}

func TestOutputsErrorsAreTheAPIs(t *testing.T) {
	f := newFake(t)
	var n int
	f.handle("/v1/output", func(w http.ResponseWriter, r *http.Request) {
		n++
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			answer(w, 429, apiError("rate_limited", "already follows 4 log stream(s)"))
			return
		}
		answer(w, 409, apiError("conflict", "rank 0's container has not started"))
	})
	c, w := client(t, f, clientOpts{})
	_, err := c.Output(context.Background(), ref, OutputOptions{Follow: true})
	if !errors.Is(err, ErrConflict) || len(w.d) != 1 || w.d[0] != time.Second {
		t.Fatalf("%v, waits %v", err, w.d)
	}
}

func TestListIteratesThePagesPassingTheContinueToken(t *testing.T) {
	f := newFake(t)
	var got []string
	f.handle("/v1/list", func(w http.ResponseWriter, r *http.Request) {
		var req ListRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		token := req.Continue
		got = append(got, token)
		item := func(name string) map[string]any {
			return map[string]any{"namespace": "team-a", "name": name, "uid": "u-" + name, "jobId": nil, "n": nil,
				"phase": "Running", "orphan": "team-a/" + name, "deletionTimestamp": nil}
		}
		switch token {
		case "":
			answer(w, 200, map[string]any{"items": []any{item("dj-a-s1")}, "continue": "p2"})
		case "p2":
			answer(w, 200, map[string]any{"items": []any{}, "continue": "p3"}) // a page may be empty, with a token
		case "p3":
			answer(w, 200, map[string]any{"items": []any{item("dj-b-s1"), item("dj-c-s1")}, "continue": nil})
		default:
			answer(w, 400, map[string]any{"error": "invalid", "message": "expired", "field": "continue"})
		}
	})
	c, _ := client(t, f, clientOpts{})
	items, err := c.ListAll(context.Background(), ListRequest{Namespace: "team-a", Limit: 1})
	var names []string
	for _, i := range items {
		names = append(names, i.Name)
	}
	if err != nil || !slices.Equal(names, []string{"dj-a-s1", "dj-b-s1", "dj-c-s1"}) || !slices.Equal(got, []string{"", "p2", "p3"}) {
		t.Fatalf("%v %v, tokens sent %q", names, err, got)
	}
	// Breaking out of the loop reads no further page.
	got = nil
	for page, err := range c.List(context.Background(), ListRequest{Namespace: "team-a"}) {
		if err != nil || len(page.Items) != 1 {
			t.Fatal(page, err)
		}
		break
	}
	if len(got) != 1 {
		t.Fatalf("pages read after break: %q", got)
	}
	// An error ends the iteration, yielded once.
	var errs []error
	for _, err := range c.List(context.Background(), ListRequest{Namespace: "team-a", Continue: "expired"}) {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], ErrInvalid) {
		t.Fatalf("%v", errs)
	}
}

func TestCheckAgentTellsAnOlderAgent(t *testing.T) {
	f := newFake(t)
	doc := document(t)
	f.handle("/v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
	c, _ := client(t, f, clientOpts{opts: []Option{WithTokenFile(filepath.Join(t.TempDir(), "none"))}})
	if err := c.CheckAgent(context.Background()); err != nil {
		t.Fatalf("the committed document: %v", err) // and no token was needed
	}
	var older map[string]any
	_ = json.Unmarshal(doc, &older)
	delete(older["paths"].(map[string]any), "/v1/list")
	f.handle("/v1/openapi.json", func(w http.ResponseWriter, r *http.Request) { answer(w, 200, older) })
	if err := c.CheckAgent(context.Background()); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "/v1/list") {
		t.Fatalf("%v", err)
	}
	older["info"].(map[string]any)["version"] = "2"
	if err := c.CheckAgent(context.Background()); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), `"2"`) {
		t.Fatalf("%v", err)
	}
}

func TestTheClientCallsEveryOperationOfTheDocument(t *testing.T) {
	var doc struct {
		Paths map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(document(t), &doc); err != nil {
		t.Fatal(err)
	}
	var served []string
	for path := range doc.Paths {
		if path != "/v1/openapi.json" {
			served = append(served, path)
		}
	}
	sort.Strings(served)
	ours := slices.Sorted(slices.Values(operations))
	if !slices.Equal(served, ours) {
		t.Fatalf("the document's operations %q, the client's %q", served, ours)
	}
}

func TestAFollowedLogMayBeQuietLongerThanTheTimeout(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/output", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(500 * time.Millisecond) // nothing logged yet: no answer yet
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("at last\n"))
	})
	c, _ := client(t, f, clientOpts{opts: []Option{WithTimeout(200 * time.Millisecond), WithRetry(RetryPolicy{})}})
	req := OutputOptions{Follow: true}
	out, err := c.Output(context.Background(), ref, req)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(out); string(got) != "at last\n" || err != nil {
		t.Fatalf("%q %v", got, err)
	}
	out.Close()
	req.Follow = false
	if _, err := c.Output(context.Background(), ref, req); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("without follow the timeout applies: %v", err)
	}
}
