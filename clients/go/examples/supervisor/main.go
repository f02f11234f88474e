// Command supervisor is a small supervisor: it runs one job through the agent's API as dispatch would,
// printing each step: Preflight, Start, Open, a Hold and Release, Status and Output, then Stop.
//
//	go run ./examples/supervisor -server https://dispatch-k8s.dispatch-system.svc:8443 \
//	    -ca-file ca.crt -token-file token -namespace team-a -runtime dispatch-torch -queue team-a
//
// Without -queue the job runs in plain mode. It exits 0 when every step did what the API says, 1 naming the
// step that did not.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/phpboyscout/dispatch-k8s/clients/go/agent"
)

type resolveFlag []string

func (r *resolveFlag) String() string     { return strings.Join(*r, " ") }
func (r *resolveFlag) Set(v string) error { *r = append(*r, v); return nil }

func main() {
	server := flag.String("server", os.Getenv("DISPATCH_AGENT_SERVER"), "the agent's URL")
	caFile := flag.String("ca-file", os.Getenv("DISPATCH_AGENT_CA_FILE"), "the CA bundle that verifies the agent")
	tokenFile := flag.String("token-file", os.Getenv("DISPATCH_AGENT_TOKEN_FILE"), "the bearer token, read at every call")
	audience := flag.String("audience", "", "the audience the agent's tokenAudiences expects, if any")
	namespace := flag.String("namespace", "team-a", "the TrainJob's namespace")
	runtime := flag.String("runtime", "dispatch-torch", "the ClusterTrainingRuntime to copy")
	queue := flag.String("queue", "", "the LocalQueue (Kueue mode); empty: plain mode")
	image := flag.String("image", "registry.example/train:1", "the trainer's image")
	within := flag.Duration("within", 2*time.Minute, "how long each wait may take")
	keep := flag.Bool("keep", false, "leave the job running: do not Stop it")
	var resolve resolveFlag
	flag.Var(&resolve, "resolve", "HOST:ADDRESS: connect to HOST at ADDRESS (repeatable)")
	flag.Parse()

	opts := []agent.Option{agent.WithTokenFile(*tokenFile), agent.WithUserAgent("dispatch-example-supervisor")}
	if *caFile != "" {
		opts = append(opts, agent.WithCAFile(*caFile))
	}
	if *audience != "" {
		opts = append(opts, agent.WithAudience(*audience))
	}
	for _, r := range resolve {
		host, address, ok := strings.Cut(r, ":")
		if !ok {
			fail("usage", fmt.Errorf("-resolve %q is not HOST:ADDRESS", r))
		}
		opts = append(opts, agent.WithResolve(host, address))
	}
	c, err := agent.New(*server, opts...)
	if err != nil {
		fail("usage", err)
	}
	defer c.Close()
	s := &supervisor{c: c, within: *within}
	if err := s.run(context.Background(), *namespace, *runtime, *queue, *image, *keep); err != nil {
		fail(s.step, err)
	}
}

func fail(step string, err error) {
	fmt.Fprintf(os.Stderr, "supervisor: %s: %v\n", step, err)
	os.Exit(1)
}

type supervisor struct {
	c      *agent.Client
	within time.Duration
	step   string
}

// say prints a step: its name, what Status shows, and a note.
func (s *supervisor) say(st *agent.StatusResponse, note string) {
	a := "-"
	if st != nil && st.A != nil {
		a = fmt.Sprint(*st.A)
	}
	phase, pods := "-", 0
	if st != nil {
		phase, pods = st.Phase, len(st.Pods)
	}
	fmt.Printf("%-10s %-9s A=%-2s pods=%d  %s\n", s.step, phase, a, pods, note)
}

// await polls Status until ok says the job is there.
func (s *supervisor) await(ctx context.Context, ref agent.ObjectRef, what string, ok func(*agent.StatusResponse) bool) (*agent.StatusResponse, error) {
	deadline := time.Now().Add(s.within)
	for {
		st, err := s.c.Status(ctx, ref)
		if err != nil {
			return nil, err
		}
		if ok(st) {
			return st, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: not within %s (phase %s, ceased: %s)", what, s.within, st.Phase, deref(st.CeasedReason))
		}
		time.Sleep(time.Second)
	}
}

func runningWith(a int) func(*agent.StatusResponse) bool {
	return func(st *agent.StatusResponse) bool {
		return st.Phase == "Running" && st.A != nil && *st.A == a && len(st.Pods) > 0
	}
}

func (s *supervisor) run(ctx context.Context, namespace, runtime, queue, image string, keep bool) error {
	s.step = "Agent"
	if err := s.c.CheckAgent(ctx); err != nil {
		return err
	}

	s.step = "Preflight"
	var kueue *agent.KueueSpec
	if queue != "" {
		kueue = &agent.KueueSpec{LocalQueue: queue}
	}
	caps, err := s.c.Preflight(ctx, agent.PreflightRequest{Namespace: namespace, Runtime: agent.RuntimeRef{Name: runtime}, Kueue: kueue})
	if err != nil {
		return err
	}
	if caps.ObserveOnly {
		return fmt.Errorf("the agent is observe-only: %s", deref(caps.ObserveOnlyReason))
	}
	s.say(nil, fmt.Sprintf("start gate %v, readmission gate %v (%s)", caps.StartGate, caps.ReadmissionGate, caps.ReadmissionGateReason))

	s.step = "Start"
	started, err := s.c.Start(ctx, agent.StartRequest{
		JobID: jobID(), N: 1, Attempt: 0, Namespace: namespace, Runtime: agent.RuntimeRef{Name: runtime},
		Image: image, Command: []string{"python", "train.py"}, Args: []string{"--epochs", "3"}, Kueue: kueue,
	})
	if err != nil {
		return err
	}
	ref := agent.Ref(started) // a real supervisor records name and uid now, before anything runs
	st, err := s.c.Status(ctx, ref)
	if err != nil {
		return err
	}
	s.say(st, fmt.Sprintf("%s uid %s, closed (gate %s)", started.Name, started.UID, st.Gate))

	s.step = "Open"
	opened, err := s.c.Open(ctx, ref)
	if err != nil {
		return err
	}
	if st, err = s.await(ctx, ref, "running", runningWith(1)); err != nil {
		return err
	}
	s.say(st, opened.Outcome)

	s.step = "Hold"
	held, err := s.c.Hold(ctx, agent.HoldRequest{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID, Who: "example-supervisor", Reason: "a maintenance window"})
	if err != nil {
		return err
	}
	if st, err = s.await(ctx, ref, "held, its pods gone", func(st *agent.StatusResponse) bool { return st.Phase == "Held" && len(st.Pods) == 0 }); err != nil {
		return err
	}
	s.say(st, fmt.Sprintf("%s; ceased %v: %s", held.Outcome, st.Ceased, deref(st.CeasedReason)))

	s.step = "Release"
	released, err := s.c.Release(ctx, ref)
	for errors.Is(err, agent.ErrConflict) { // plain mode: a pod of the previous execution may still run
		time.Sleep(time.Second)
		released, err = s.c.Release(ctx, ref)
	}
	if err != nil {
		return err
	}
	if st, err = s.await(ctx, ref, "running again", runningWith(2)); err != nil {
		return err
	}
	s.say(st, released.Outcome+"; the new execution has a higher A")

	s.step = "Status"
	s.say(st, fmt.Sprintf("mode %s, check %s, ceased %v", st.Mode, deref(st.CheckState), st.Ceased))
	for _, e := range st.Executions {
		fmt.Printf("  execution A=%d J=%d R=%s DISPATCH_EPOCH=%s DISPATCH_ATTEMPT=%s pods %s\n",
			e.A, e.J, deref(e.R), deref(e.Epoch), deref(e.Attempt), strings.Join(e.Pods, ","))
	}

	s.step = "Output"
	out, err := s.c.Output(ctx, agent.OutputRequest{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID, TailLines: agent.Ptr(20)})
	if err != nil {
		return err
	}
	log, err := io.ReadAll(out)
	out.Close()
	if err != nil {
		return err
	}
	s.say(st, fmt.Sprintf("rank 0's log (%s), last lines: %d bytes", out.Pod, len(log)))
	for _, line := range strings.Split(strings.TrimRight(string(log), "\n"), "\n") {
		if line != "" {
			fmt.Println("  | " + line)
		}
	}

	if keep {
		return nil
	}
	s.step = "Stop"
	stopped, err := s.c.Stop(ctx, ref)
	if err != nil {
		return err
	}
	// Deleted in the foreground: the TrainJob stays, with a deletionTimestamp, until its pods are gone.
	st, err = s.await(ctx, ref, "being deleted", func(st *agent.StatusResponse) bool { return st.DeletionTimestamp != nil })
	if errors.Is(err, agent.ErrNotFound) {
		s.say(nil, stopped.Outcome+"; gone")
		return nil
	}
	if err != nil {
		return err
	}
	s.say(st, stopped.Outcome+"; deleted in the foreground since "+*st.DeletionTimestamp)
	return nil
}

func deref[T any](p *T) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

// jobID is a new ULID, as dispatch names its jobs: 48 bits of milliseconds, 80 random bits, Crockford base32.
func jobID() string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	var b [16]byte
	ms := uint64(time.Now().UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	_, _ = rand.Read(b[6:])
	var hi, lo uint64
	for i := range 8 {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[i+8])
	}
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
