package agent

// The contract tests against a live agent: tests/goclient/test_go_contract.py starts one on the harness's
// tier B (real Kueue, JobSet, Trainer, kwok), as a ServiceAccount with the chart's RBAC, and supervisors
// with exactly the supervisor's Role, then runs these with the environment below. Without it they skip;
// that test fails when they do.
//
//	DISPATCH_AGENT_SERVER, DISPATCH_AGENT_CA_FILE, DISPATCH_AGENT_TOKEN_FILE  the agent, its CA, the supervisor's token
//	DISPATCH_CONTRACT_NAMESPACE, _RUNTIME, _QUEUE        where jobs run; a LocalQueue whose ClusterQueue lists dispatch's check
//	DISPATCH_CONTRACT_UNCHECKED_QUEUE                    a LocalQueue whose ClusterQueue does not (Preflight fails)
//	DISPATCH_CONTRACT_AUDIENCE                           the agent's tokenAudiences
//	DISPATCH_CONTRACT_TOKENS                             a folder: rotated, stranger, elsewhere, wrong-audience
//	DISPATCH_CONTRACT_FOREIGN                            namespace/name/uid of a TrainJob that is not dispatch's
//	DISPATCH_CONTRACT_CONTROL                            the harness's hand: POST /linger, /let-go {"pod"}, /log {"line"}

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phpboyscout/dispatch-k8s/clients/go/internal/validate"
)

type live struct {
	server, ca, tokenFile, ns, runtime, queue, unchecked, audience, tokens, control string
	foreign                                                                         ObjectRef
	mu                                                                              sync.Mutex
	checkers                                                                        []*validate.Transport
}

func liveAgent(t *testing.T) *live {
	env := func(name string) string { return os.Getenv("DISPATCH_CONTRACT_" + name) }
	l := &live{server: os.Getenv("DISPATCH_AGENT_SERVER"), ca: os.Getenv("DISPATCH_AGENT_CA_FILE"),
		tokenFile: os.Getenv("DISPATCH_AGENT_TOKEN_FILE"), ns: env("NAMESPACE"), runtime: env("RUNTIME"),
		queue: env("QUEUE"), unchecked: env("UNCHECKED_QUEUE"), audience: env("AUDIENCE"), tokens: env("TOKENS"),
		control: env("CONTROL")}
	if l.server == "" {
		t.Skip("needs a live agent: tests/goclient/test_go_contract.py starts one and sets DISPATCH_AGENT_SERVER")
	}
	parts := strings.Split(env("FOREIGN"), "/")
	if len(parts) != 3 || l.ns == "" || l.tokens == "" || l.control == "" {
		t.Fatalf("the contract's environment is incomplete: %+v", l)
	}
	l.foreign = ObjectRef{Namespace: parts[0], Name: parts[1], UID: parts[2]}
	return l
}

// client is a Client of the live agent, every exchange checked against the document.
func (l *live) client(t *testing.T, opts ...Option) *Client {
	t.Helper()
	base := []Option{WithCAFile(l.ca), WithTokenFile(l.tokenFile), WithAudience(l.audience), WithTimeout(90 * time.Second),
		WithTransportWrapper(func(rt http.RoundTripper) http.RoundTripper {
			v, err := validate.New(document(t), rt)
			if err != nil {
				t.Fatal(err)
			}
			l.mu.Lock()
			l.checkers = append(l.checkers, v)
			l.mu.Unlock()
			return v
		})}
	c, err := New(l.server, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func (l *live) token(who string) string { return filepath.Join(l.tokens, who) }

// hand asks the harness to do what the test's supervisor may not (a kubelet that is slow to stop a pod).
func (l *live) hand(t *testing.T, action string, body map[string]string) {
	t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := http.Post(l.control+"/"+action, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the harness refused %s %v: %s", action, body, resp.Status)
	}
}

func (l *live) start(kueue bool) StartRequest {
	req := StartRequest{JobID: NewJobID(), N: 1, G: Ptr(0), Attempt: 0, Namespace: l.ns, Runtime: RuntimeRef{Name: l.runtime},
		Image: "registry.example/train:1", Command: []string{"python", "train.py"}, Env: map[string]string{"LR": "0.1"}}
	if kueue {
		req.Kueue = &KueueSpec{LocalQueue: l.queue}
	}
	return req
}

// eventually polls probe until it answers without an error, for at most within.
func eventually[T any](t *testing.T, within time.Duration, what string, probe func() (T, error)) T {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		v, err := probe()
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func phase(c *Client, r ObjectRef, want Phase, check func(*Status) error) func() (*Status, error) {
	return func() (*Status, error) {
		s, err := c.Status(context.Background(), r)
		if err != nil {
			return nil, err
		}
		if s.Phase != want {
			return nil, fmt.Errorf("phase %s, not %s", s.Phase, want)
		}
		if check != nil {
			if err := check(s); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
}

func running(a int) func(*Status) error {
	return func(s *Status) error {
		if s.A == nil || *s.A != a || len(s.Pods) != 1 || s.Pods[0].Phase == nil || *s.Pods[0].Phase != "Running" {
			return fmt.Errorf("A %v, pods %+v", s.A, s.Pods)
		}
		return nil
	}
}

func want(t *testing.T, err, sentinel error, says string) *Error {
	t.Helper()
	var e *Error
	if !errors.Is(err, sentinel) || !errors.As(err, &e) || !strings.Contains(e.Message, says) {
		t.Fatalf("want %v saying %q, got %v", sentinel, says, err)
	}
	return e
}

func TestContract(t *testing.T) {
	l := liveAgent(t)
	ctx := context.Background()
	c := l.client(t)

	t.Run("the agent serves this client's API", func(t *testing.T) {
		if err := c.CheckAgent(ctx); err != nil {
			t.Fatal(err)
		}
		caps := eventually(t, 60*time.Second, "a passing Kueue-mode Preflight", func() (*Capabilities, error) {
			caps, err := c.Preflight(ctx, PreflightRequest{Namespace: l.ns, Runtime: RuntimeRef{Name: l.runtime}, Kueue: &KueueSpec{LocalQueue: l.queue}})
			if err == nil && caps.ObserveOnly {
				err = fmt.Errorf("observe-only: %v", caps.ObserveOnlyReason)
			}
			return caps, err
		})
		if !caps.StartGate || !caps.ReadmissionGate || caps.Mode != ModeKueue {
			t.Fatalf("%+v", caps)
		}
		if now, err := c.Capabilities(ctx); err != nil || now.ObserveOnly {
			t.Fatalf("%+v %v", now, err)
		}
	})

	t.Run("what a supervisor meets", func(t *testing.T) {
		gone := ObjectRef{Namespace: l.ns, Name: "dj-" + strings.ToLower(NewJobID()) + "-s1", UID: "no-such-uid"}
		e := want(t, func() error { _, err := c.Status(ctx, gone); return err }(), ErrNotFound, "does not exist")
		if e.Orphans == nil || len(e.Orphans) != 0 {
			t.Errorf("a name nothing ever used leaves no orphans: %q", e.Orphans)
		}

		bad := l.start(false)
		bad.N = 1_000_000
		e = want(t, func() error { _, err := c.Start(validate.ExpectInvalid(ctx), bad); return err }(), ErrInvalid, "less than 1000000")
		if e.Field != "n" {
			t.Errorf("field %q", e.Field)
		}

		// A TrainJob that is not dispatch's: refused before anything is read for it, whoever may edit it.
		for name, call := range map[string]func() error{
			"status": func() error { _, err := c.Status(ctx, l.foreign); return err },
			"hold": func() error {
				_, err := c.Hold(ctx, l.foreign, HoldRequest{Who: "supervisor", Reason: "mine?"})
				return err
			},
			"stop": func() error { _, err := c.Stop(ctx, l.foreign); return err },
		} {
			t.Run("a stranger's TrainJob: "+name, func(t *testing.T) { want(t, call(), ErrRejected, "is not dispatch's") })
		}

		// Tokens: a stranger (no Role), a supervisor of another namespace, one the API server refuses, and a
		// token bound to the API server's audience rather than the agent's.
		_, err := l.client(t, WithTokenFile(l.token("stranger"))).Status(ctx, gone)
		want(t, err, ErrForbidden, "may not get trainjobs")
		_, err = l.client(t, WithTokenFile(l.token("elsewhere"))).Status(ctx, gone)
		want(t, err, ErrForbidden, "may not get trainjobs")
		_, err = l.client(t, WithToken("not-a-token"), WithAudience("")).Status(ctx, gone)
		want(t, err, ErrUnauthenticated, "not accepted")
		_, err = l.client(t, WithTokenFile(l.token("wrong-audience")), WithAudience("")).Status(ctx, gone)
		want(t, err, ErrUnauthenticated, "not accepted") // the API server's review, for the agent's audience
		checked := l.client(t, WithTokenFile(l.token("wrong-audience")))
		_, err = checked.Status(ctx, gone)
		want(t, err, ErrUnauthenticated, "nothing was sent")

		// The token file rotates under a running client: each call reads the file it finds.
		file := filepath.Join(t.TempDir(), "token")
		rotating := l.client(t, WithTokenFile(file))
		for _, who := range []string{"rotated", "stranger", "supervisor"} {
			src := l.token(who)
			if who == "supervisor" {
				src = l.tokenFile
			}
			raw, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = rotating.Status(ctx, gone)
			if who == "stranger" {
				want(t, err, ErrForbidden, "may not")
			} else {
				want(t, err, ErrNotFound, "does not exist")
			}
		}

		// Observe-only in Kueue mode: a Preflight through a queue that does not list dispatch's check fails,
		// and Start refuses until a Kueue-mode Preflight passes again.
		caps, err := c.Preflight(ctx, PreflightRequest{Namespace: l.ns, Runtime: RuntimeRef{Name: l.runtime}, Kueue: &KueueSpec{LocalQueue: l.unchecked}})
		if err != nil || !caps.ObserveOnly || !strings.Contains(caps.ObserveOnlyReason, "does not list dispatch's AdmissionCheck") {
			t.Fatalf("%+v %v", caps, err)
		}
		_, err = c.Start(ctx, l.start(true))
		want(t, err, ErrObserveOnly, "observe-only")
		eventually(t, 60*time.Second, "a passing Kueue-mode Preflight", func() (*Capabilities, error) {
			caps, err := c.Preflight(ctx, PreflightRequest{Namespace: l.ns, Runtime: RuntimeRef{Name: l.runtime}, Kueue: &KueueSpec{LocalQueue: l.queue}})
			if err == nil && caps.ObserveOnly {
				err = errors.New(caps.ObserveOnlyReason)
			}
			return caps, err
		})
	})

	t.Run("jobs", func(t *testing.T) {
		t.Run("Kueue mode: held before Open, run, streamed, held and released, listed, stopped", func(t *testing.T) {
			t.Parallel()
			kueueJob(t, l, c)
		})
		t.Run("plain mode: Release waits for the previous execution's pod", func(t *testing.T) {
			t.Parallel()
			plainJob(t, l, c)
		})
	})

	t.Run("every exchange conformed to the document", func(t *testing.T) {
		seen := map[string]bool{}
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, v := range l.checkers {
			if p := v.Problems(); len(p) > 0 {
				t.Errorf("exchanges that do not conform:\n%s", strings.Join(p, "\n"))
			}
			for _, x := range v.Exchanges() {
				fields := strings.Fields(x)
				seen[fields[1]+" "+fields[2]] = true
				seen[fields[2]] = true
			}
		}
		for _, path := range operations {
			if !seen[path+" 200"] {
				t.Errorf("%s never answered 200", path)
			}
		}
		for _, status := range []string{"400", "401", "403", "404", "409", "410", "429", "503"} {
			if !seen[status] {
				t.Errorf("no answer %s was seen", status)
			}
		}
	})
}

func kueueJob(t *testing.T, l *live, c *Client) {
	ctx := context.Background()
	req := l.start(true)
	started, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	r := started.Ref()
	again, err := c.Start(ctx, req) // the same request again: the same object
	if err != nil || *again != *started {
		t.Fatalf("Start again: %+v %v", again, err)
	}
	if _, err := c.Open(ctx, ObjectRef{Namespace: r.Namespace, Name: r.Name, UID: "another-uid"}); err != nil {
		want(t, err, ErrConflict, "a different object of the same name")
	} else {
		t.Fatal("Open of another uid succeeded")
	}
	gated, err := c.Status(ctx, r)
	if err != nil || gated.Phase != "Gated" || gated.Gate != GateClosed || !gated.Ceased {
		t.Fatalf("%+v %v", gated, err)
	}
	_, err = c.Output(ctx, r, OutputOptions{})
	want(t, err, ErrNotFound, "")

	// A hold placed before Open survives Open: the job is held, nothing runs, until Release.
	held, err := c.Hold(ctx, r, HoldRequest{Who: "supervisor", Reason: "a maintenance window"})
	if err != nil || held.Outcome != "held: Workload deactivated" {
		t.Fatalf("%+v %v", held, err)
	}
	opened, err := c.Open(ctx, r)
	if err != nil || opened.Outcome != "gate removed; held until Release" || len(opened.HeldBy) != 0 {
		t.Fatalf("%+v %v", opened, err)
	}
	s := eventually(t, 30*time.Second, "held after Open", phase(c, r, "Held", nil))
	if s.Hold == nil || s.Hold.Who != "supervisor" || s.Gate != GateOpen || len(s.Pods) != 0 {
		t.Fatalf("%+v", s)
	}
	if rel, err := c.Release(ctx, r); err != nil || rel.Outcome != "released: Workload reactivated" {
		t.Fatalf("%+v %v", rel, err)
	}
	s = eventually(t, 90*time.Second, "admitted with A raised to 1, running", phase(c, r, "Running", running(1)))
	if len(s.Executions) != 1 || s.Executions[0].Epoch == nil || s.Executions[0].Attempt == nil {
		t.Fatalf("%+v", s.Executions)
	}

	// Output, followed: lines written to the container's log arrive on the open stream. (A followed log is
	// answered once it has something to send: the first line is written before the streams open.)
	first, second := NewJobID()+" step 1 loss 0.9", NewJobID()+" step 2 loss 0.5"
	l.hand(t, "log", map[string]string{"line": first})
	var streams []*Output
	for range 4 {
		out, err := c.Output(ctx, r, OutputOptions{Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, out)
	}
	if streams[0].Pod != s.Pods[0].Name {
		t.Errorf("streamed %s, rank 0 is %s", streams[0].Pod, s.Pods[0].Name)
	}
	// A fifth follower for the same user is refused (maxFollowStreams), saying when to try again.
	_, err = l.client(t, WithRetry(RetryPolicy{})).Output(ctx, r, OutputOptions{Follow: true})
	if e := want(t, err, ErrRateLimited, "maxFollowStreams"); e.RetryAfter <= 0 {
		t.Errorf("no Retry-After: %+v", e)
	}
	lines := make(chan string)
	go func() {
		scanner := bufio.NewScanner(streams[0])
		for scanner.Scan() {
			lines <- scanner.Text()
		}
		close(lines)
	}()
	awaitLine := func(want string) {
		deadline := time.After(60 * time.Second)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("the stream ended before %q came", want)
				}
				if line == want {
					return
				}
			case <-deadline:
				t.Fatalf("%q did not come through the stream", want)
			}
		}
	}
	awaitLine(first)
	l.hand(t, "log", map[string]string{"line": second}) // written while the stream is open: followed
	awaitLine(second)
	for _, out := range streams {
		if err := out.Close(); err != nil {
			t.Error(err)
		}
	}

	// Held while running: the pods go; released: A raised again before the next execution.
	if held, err := c.Hold(ctx, r, HoldRequest{Who: "supervisor", Reason: "preempted by the supervisor"}); err != nil || held.Outcome != "held: Workload deactivated" {
		t.Fatalf("%+v %v", held, err)
	}
	eventually(t, 90*time.Second, "held, its pods gone", phase(c, r, "Held", func(s *Status) error {
		if len(s.Pods) != 0 {
			return fmt.Errorf("pods %+v", s.Pods)
		}
		return nil
	}))
	if _, err := c.Release(ctx, r); err != nil {
		t.Fatal(err)
	}
	s = eventually(t, 90*time.Second, "re-admitted with A raised to 2", phase(c, r, "Running", running(2)))
	if n := len(s.Executions); n == 0 || s.Executions[n-1].A != 2 || s.Executions[n-1].R == nil || *s.Executions[n-1].R != 2 {
		t.Errorf("executions %+v", s.Executions)
	}

	// List, a page at a time: the job is there under its JobID.
	var pages int
	var found []ListItem
	for page, err := range c.List(ctx, ListRequest{Namespace: l.ns, JobID: req.JobID, Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		pages++
		found = append(found, page.Items...)
	}
	if len(found) != 1 || found[0].UID != r.UID || found[0].N == nil || *found[0].N != 1 || pages < 1 {
		t.Fatalf("%d page(s): %+v", pages, found)
	}

	// Stop: deleted in the foreground, the TrainJob stays (deletionTimestamp) until its pods are gone.
	if stopped, err := c.Stop(ctx, r); err != nil || stopped.Outcome != "stopping" {
		t.Fatalf("%+v %v", stopped, err)
	}
	eventually(t, 30*time.Second, "being deleted", func() (*Status, error) {
		s, err := c.Status(ctx, r)
		if err == nil && s.DeletionTimestamp.IsZero() {
			err = errors.New("no deletionTimestamp yet")
		}
		if errors.Is(err, ErrNotFound) {
			return nil, nil // gone already
		}
		return s, err
	})
	if again, err := c.Stop(ctx, r); err != nil || (again.Outcome != "stopping" && again.Outcome != "already gone") {
		t.Fatalf("Stop again: %+v %v", again, err)
	}
}

func plainJob(t *testing.T, l *live, c *Client) {
	ctx := context.Background()
	started, err := c.Start(ctx, l.start(false))
	if err != nil {
		t.Fatal(err)
	}
	r := started.Ref()
	snapshot, err := c.Watch(ctx, WatchRequest{Namespace: l.ns})
	if err != nil || !slices.ContainsFunc(snapshot.Items, func(i ListItem) bool { return i.Ref() == r && i.Phase == PhaseGated }) {
		t.Fatalf("Watch's snapshot: %+v %v", snapshot, err)
	}
	_, err = c.Watch(ctx, WatchRequest{Namespace: l.ns, Version: "not-one"})
	want(t, err, ErrExpired, "watch again without a version")
	if opened, err := openAsASupervisor(ctx, c, r); err != nil || opened.A == nil || *opened.A != 1 {
		t.Fatalf("%+v %v", opened, err)
	}
	changed, err := c.Watch(ctx, WatchRequest{Namespace: l.ns, Version: snapshot.Version, Wait: 20 * time.Second})
	if err != nil || !slices.ContainsFunc(changed.Items, func(i ListItem) bool { return i.Ref() == r }) {
		t.Fatalf("Watch after Open: %+v %v", changed, err)
	}
	if again, err := c.Open(ctx, r); err != nil || again.Outcome != "already past its gate" {
		t.Fatalf("Open again: %+v %v", again, err)
	}
	s := eventually(t, 90*time.Second, "running after Open", phase(c, r, "Running", running(1)))
	pod := s.Pods[0].Name

	// The kubelet is slow to stop the pod: after a Hold it stays Terminating, and Release refuses, naming it.
	l.hand(t, "linger", map[string]string{"pod": pod})
	if held, err := c.Hold(ctx, r, HoldRequest{Who: "supervisor", Reason: "drain"}); err != nil || held.Outcome != "held: TrainJob suspended" {
		t.Fatalf("%+v %v", held, err)
	}
	eventually(t, 60*time.Second, "held, its pod still stopping", phase(c, r, "Held", func(s *Status) error {
		if len(s.Pods) != 1 || !s.Pods[0].MayStillRun || s.Ceased {
			return fmt.Errorf("pods %+v, ceased %v", s.Pods, s.Ceased)
		}
		return nil
	}))
	_, err = c.Release(ctx, r)
	want(t, err, ErrConflict, "waiting for 1 pod(s) of the previous execution that may still run: "+pod)
	l.hand(t, "let-go", map[string]string{"pod": pod})
	released := eventually(t, 60*time.Second, "released once the pod is gone", func() (*OutcomeResponse, error) {
		return c.Release(ctx, r)
	})
	if released.Outcome != "released: TrainJob unsuspended" || released.A == nil || *released.A != 2 {
		t.Fatalf("%+v", released)
	}
	eventually(t, 90*time.Second, "running again with A 2", phase(c, r, "Running", running(2)))
	if _, err := c.Stop(ctx, r); err != nil {
		t.Fatal(err)
	}
	// Changes: from a snapshot to the job's deletion.
	watching, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for item, err := range c.Changes(watching, l.ns) {
		if err != nil {
			t.Fatalf("Changes ended before the stopped job was reported gone: %v", err)
		}
		if item.Ref() == r && item.Phase == PhaseDeleted {
			break
		}
	}
}

// openAsASupervisor calls Open as the errors document a supervisor should: a conflict (the TrainJob changed under
// each of the agent's own writes, as Trainer writes a new TrainJob's status in its first seconds) is re-read and
// retried; anything else is the answer.
func openAsASupervisor(ctx context.Context, c *Client, r ObjectRef) (*OpenResponse, error) {
	for tries := 1; ; tries++ {
		opened, err := c.Open(ctx, r)
		if !errors.Is(err, ErrConflict) || tries == 5 {
			return opened, err
		}
		time.Sleep(time.Second)
	}
}
