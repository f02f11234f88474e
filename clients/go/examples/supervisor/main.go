// Command supervisor is a small supervisor and a reference for writing one: it runs one job through the
// agent's API as dispatch would, printing each step: Preflight, Start, Open, a Hold and Release, Status and
// Output, then Stop.
//
//	go run ./examples/supervisor -server https://dispatch-k8s.dispatch-system.svc:8443 \
//	    -ca-file ca.crt -token-file token -namespace team-a -runtime dispatch-torch -queue team-a
//
// Without -queue the job runs in plain mode. It exits 0 when every step did what the API says, 1 naming the
// step that did not (and 130 when interrupted, after stopping the job).
//
// The habits it shows:
//   - one context for the whole run, ended by SIGINT or SIGTERM (signal.NotifyContext); every wait selects on
//     it, so an interrupted supervisor stops at once, never mid-sleep;
//   - every wait and every repeat is bounded (-within), never a loop that may spin for ever;
//   - a write cut off after it was sent (agent.ErrOutcomeUnknown) is resolved by reading, never guessed: a
//     Start is found again through List by its JobID (or repeated, which is safe), any other write is repeated,
//     which the API makes safe for every operation (docs/api.md, "Repeating a call");
//   - the JobID is made once (agent.NewJobID) and the TrainJob's reference recorded as soon as Start answers;
//   - it is written against agent.Interface, so its tests run it against agentfake's in-memory agent.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/phpboyscout/dispatch-k8s/clients/go/agent"
)

type resolveFlag []string

func (r *resolveFlag) String() string     { return strings.Join(*r, " ") }
func (r *resolveFlag) Set(v string) error { *r = append(*r, v); return nil }

func main() {
	server := flag.String("server", os.Getenv("DISPATCH_AGENT_SERVER"), "the agent's URL")
	caFile := flag.String("ca-file", os.Getenv("DISPATCH_AGENT_CA_FILE"), "the CA bundle that verifies the agent (re-read hourly and after a certificate failure)")
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

	// SIGINT or SIGTERM (a pod being deleted) ends ctx: every call and every wait returns at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s := &supervisor{api: c, checker: c, within: *within, out: os.Stdout}
	err = s.run(ctx, job{namespace: *namespace, runtime: *runtime, queue: *queue, image: *image, keep: *keep})
	if err != nil && ctx.Err() != nil {
		s.cleanUp() // interrupted: do not leave a job running that nobody supervises
		stop()
		fmt.Fprintf(os.Stderr, "supervisor: %s: interrupted: %v\n", s.step, err)
		os.Exit(130)
	}
	if err != nil {
		fail(s.step, err)
	}
}

func fail(step string, err error) {
	fmt.Fprintf(os.Stderr, "supervisor: %s: %v\n", step, err)
	os.Exit(1)
}

// job is what the supervisor runs.
type job struct {
	namespace, runtime, queue, image string
	keep                             bool
}

type supervisor struct {
	api     agent.Interface
	checker interface{ CheckAgent(context.Context) error } // nil: not checked (a fake)
	within  time.Duration
	out     io.Writer
	step    string
	ref     *agent.ObjectRef // recorded as soon as Start answers; Stopped on interruption
	// poll is the pause between two reads while waiting (a second), when Watch cannot wake it sooner.
	poll time.Duration
	// version is the last Watch answer's: a wait wakes at the namespace's next phase change.
	version string
}

// say prints a step: its name, what Status shows, and a note.
func (s *supervisor) say(st *agent.Status, note string) {
	a := "-"
	if st != nil && st.A != nil {
		a = fmt.Sprint(*st.A)
	}
	phase, pods := agent.Phase("-"), 0
	if st != nil {
		phase, pods = st.Phase, len(st.Pods)
	}
	fmt.Fprintf(s.out, "%-10s %-9s A=%-2s pods=%d  %s\n", s.step, phase, a, pods, note)
}

// pause waits d, or less when ctx ends first (its error).
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (s *supervisor) interval() time.Duration {
	if s.poll > 0 {
		return s.poll
	}
	return time.Second
}

// changed waits for a phase change in namespace (Watch), five polls at most: Status then needs no polling
// while nothing moves, and is read again as soon as something does. An agent without Watch (ErrUnsupported),
// or a Watch that fails, leaves a plain pause; an expired version is replaced by a snapshot's.
func (s *supervisor) changed(ctx context.Context, namespace string) error {
	if s.version == "" {
		if snapshot, err := s.api.Watch(ctx, agent.WatchRequest{Namespace: namespace}); err == nil {
			s.version = snapshot.Version
		}
	}
	if s.version != "" {
		answer, err := s.api.Watch(ctx, agent.WatchRequest{Namespace: namespace, Version: s.version, Wait: 5 * s.interval()})
		switch {
		case err == nil:
			s.version = answer.Version
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, agent.ErrExpired):
			s.version = ""
		}
	}
	return pause(ctx, s.interval())
}

// await reads Status until ok says the job is there, for at most s.within, waiting between reads for a phase
// change of the namespace (changed).
func (s *supervisor) await(ctx context.Context, ref agent.ObjectRef, what string, ok func(*agent.Status) bool) (*agent.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, s.within)
	defer cancel()
	var last *agent.Status
	for {
		st, err := s.api.Status(ctx, ref)
		switch {
		case err == nil && ok(st):
			return st, nil
		case err == nil:
			last = st
		case ctx.Err() == nil && (errors.Is(err, agent.ErrOutcomeUnknown) || errors.Is(err, agent.ErrUnavailable)):
			// A read: try again at the next poll (the client already repeated it a few times).
		default:
			return nil, s.late(ctx, what, last, err)
		}
		if err := s.changed(ctx, ref.Namespace); err != nil {
			return nil, s.late(ctx, what, last, err)
		}
	}
}

// late says why a wait ended: the bound (-within), the caller's context, or the error.
func (s *supervisor) late(ctx context.Context, what string, last *agent.Status, err error) error {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil && context.Cause(ctx) == context.DeadlineExceeded {
		if last != nil {
			return fmt.Errorf("%s: not within %s (phase %s, ceased: %s)", what, s.within, last.Phase, last.CeasedReason)
		}
		return fmt.Errorf("%s: not within %s", what, s.within)
	}
	return err
}

// write calls a write until it answers, for at most s.within: a cut-off (agent.ErrOutcomeUnknown) is
// repeated, which is safe for every operation (the same call completes or confirms it), and so is a conflict
// when retryConflict says so (plain mode: a pod of the previous execution is still stopping). Anything
// else is the answer.
func write[T any](ctx context.Context, s *supervisor, retryConflict bool, call func(context.Context) (*T, error)) (*T, error) {
	ctx, cancel := context.WithTimeout(ctx, s.within)
	defer cancel()
	var last error
	for {
		out, err := call(ctx)
		if err != nil && ctx.Err() != nil && last != nil {
			return nil, fmt.Errorf("%w (the last answer: %v)", err, last)
		}
		retry := errors.Is(err, agent.ErrOutcomeUnknown) || (retryConflict && errors.Is(err, agent.ErrConflict))
		if err == nil || !retry || ctx.Err() != nil {
			return out, err
		}
		last = err
		if perr := pause(ctx, s.interval()); perr != nil {
			return nil, fmt.Errorf("%w (the last answer: %v)", perr, err)
		}
	}
}

func runningWith(a int) func(*agent.Status) bool {
	return func(st *agent.Status) bool {
		return st.Phase == agent.PhaseRunning && st.A != nil && *st.A == a && len(st.Pods) > 0
	}
}

// start is Start with its recovery: after a cut-off the TrainJob may or may not exist, so List by JobID
// finds it; when it is not there, the same Start again (the same request answers the same TrainJob).
func (s *supervisor) start(ctx context.Context, req agent.StartRequest) (agent.ObjectRef, error) {
	ctx, cancel := context.WithTimeout(ctx, s.within)
	defer cancel()
	for {
		started, err := s.api.Start(ctx, req)
		if err == nil {
			return started.Ref(), nil
		}
		if !errors.Is(err, agent.ErrOutcomeUnknown) || ctx.Err() != nil {
			return agent.ObjectRef{}, err
		}
		items, lerr := s.api.ListAll(ctx, agent.ListRequest{Namespace: req.Namespace, JobID: req.JobID})
		if lerr == nil {
			for _, item := range items {
				if item.N != nil && *item.N == req.N && item.DeletionTimestamp.IsZero() {
					fmt.Fprintf(s.out, "%-10s Start was cut off; List by JobID found %s (uid %s)\n", s.step, item.Name, item.UID)
					return item.Ref(), nil
				}
			}
		}
		if err := pause(ctx, s.interval()); err != nil {
			return agent.ObjectRef{}, err
		}
	}
}

func (s *supervisor) run(ctx context.Context, j job) error {
	if s.checker != nil {
		s.step = "Agent"
		if err := s.checker.CheckAgent(ctx); err != nil {
			return err
		}
	}

	s.step = "Preflight"
	var kueue *agent.KueueSpec
	if j.queue != "" {
		kueue = &agent.KueueSpec{LocalQueue: j.queue}
	}
	caps, err := write(ctx, s, false, func(ctx context.Context) (*agent.Capabilities, error) {
		return s.api.Preflight(ctx, agent.PreflightRequest{Namespace: j.namespace, Runtime: agent.RuntimeRef{Name: j.runtime}, Kueue: kueue})
	})
	if err != nil {
		return err
	}
	if caps.ObserveOnly {
		return fmt.Errorf("the agent is observe-only: %s", caps.ObserveOnlyReason)
	}
	s.say(nil, fmt.Sprintf("start gate %v, readmission gate %v (%s)", caps.StartGate, caps.ReadmissionGate, caps.ReadmissionGateReason))

	s.step = "Start"
	ref, err := s.start(ctx, agent.StartRequest{
		JobID: agent.NewJobID(), N: 1, Attempt: 0, Namespace: j.namespace, Runtime: agent.RuntimeRef{Name: j.runtime},
		Image: j.image, Command: []string{"python", "train.py"}, Args: []string{"--epochs", "3"}, Kueue: kueue,
	})
	if err != nil {
		return err
	}
	s.ref = &ref // a real supervisor records it durably now, before anything runs
	st, err := s.api.Status(ctx, ref)
	if err != nil {
		return err
	}
	s.say(st, fmt.Sprintf("%s uid %s, closed (gate %s)", ref.Name, ref.UID, st.Gate))

	s.step = "Open"
	// Plain mode: Open answers conflict while a pod of a previous execution may still run (none here), and
	// while Trainer writes the new TrainJob's status under the agent's write: both pass; repeat, bounded.
	opened, err := write(ctx, s, true, func(ctx context.Context) (*agent.OpenResponse, error) { return s.api.Open(ctx, ref) })
	if err != nil {
		return err
	}
	if st, err = s.await(ctx, ref, "running", runningWith(1)); err != nil {
		return err
	}
	s.say(st, string(opened.Outcome))

	s.step = "Hold"
	held, err := write(ctx, s, false, func(ctx context.Context) (*agent.OutcomeResponse, error) {
		return s.api.Hold(ctx, ref, agent.HoldRequest{Who: "example-supervisor", Reason: "a maintenance window"})
	})
	if err != nil {
		return err
	}
	if st, err = s.await(ctx, ref, "held, its pods gone", func(st *agent.Status) bool { return st.Phase == agent.PhaseHeld && len(st.Pods) == 0 }); err != nil {
		return err
	}
	s.say(st, fmt.Sprintf("%s; ceased %v: %s", held.Outcome, st.Ceased, st.CeasedReason))

	s.step = "Release"
	// Plain mode: a pod of the previous execution may still be stopping (conflict, nothing written): repeated
	// until it is gone, for at most -within.
	released, err := write(ctx, s, true, func(ctx context.Context) (*agent.OutcomeResponse, error) { return s.api.Release(ctx, ref) })
	if err != nil {
		return err
	}
	if st, err = s.await(ctx, ref, "running again", runningWith(2)); err != nil {
		return err
	}
	s.say(st, string(released.Outcome)+"; the new execution has a higher A")

	s.step = "Status"
	s.say(st, fmt.Sprintf("mode %s, check %s, ceased %v", st.Mode, orDash(string(st.CheckState)), st.Ceased))
	for _, e := range st.Executions {
		fmt.Fprintf(s.out, "  execution A=%d J=%d R=%s DISPATCH_EPOCH=%s DISPATCH_ATTEMPT=%s pods %s\n",
			e.A, e.J, deref(e.R), deref(e.Epoch), deref(e.Attempt), strings.Join(e.Pods, ","))
	}

	s.step = "Output"
	if err := s.output(ctx, ref, st); err != nil {
		return err
	}

	if j.keep {
		s.ref = nil
		return nil
	}
	s.step = "Stop"
	return s.stop(ctx, ref)
}

func (s *supervisor) output(ctx context.Context, ref agent.ObjectRef, st *agent.Status) error {
	ctx, cancel := context.WithTimeout(ctx, s.within)
	defer cancel()
	out, err := s.api.Output(ctx, ref, agent.OutputOptions{TailLines: agent.Ptr(20)})
	if err != nil {
		return err
	}
	defer out.Close()
	log, err := io.ReadAll(out)
	if err != nil {
		return err
	}
	s.say(st, fmt.Sprintf("rank 0's log (%s), last lines: %d bytes", out.Pod, len(log)))
	for _, line := range strings.Split(strings.TrimRight(string(log), "\n"), "\n") {
		if line != "" {
			fmt.Fprintln(s.out, "  | "+line)
		}
	}
	return nil
}

func (s *supervisor) stop(ctx context.Context, ref agent.ObjectRef) error {
	stopped, err := write(ctx, s, false, func(ctx context.Context) (*agent.OutcomeResponse, error) { return s.api.Stop(ctx, ref) })
	if err != nil {
		return err
	}
	s.ref = nil
	// Deleted in the foreground: the TrainJob stays, with a deletionTimestamp, until its pods are gone.
	st, err := s.await(ctx, ref, "being deleted", func(st *agent.Status) bool { return !st.DeletionTimestamp.IsZero() })
	if errors.Is(err, agent.ErrNotFound) {
		s.say(nil, string(stopped.Outcome)+"; gone")
		return nil
	}
	if err != nil {
		return err
	}
	s.say(st, string(stopped.Outcome)+"; deleted in the foreground since "+st.DeletionTimestamp.Format(time.RFC3339))
	return nil
}

// cleanUp stops the job after an interruption, with a context of its own (the run's has ended), bounded.
func (s *supervisor) cleanUp() {
	if s.ref == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.api.Stop(ctx, *s.ref); err != nil {
		fmt.Fprintf(os.Stderr, "supervisor: Stop after the interruption: %v (the job %s/%s is left)\n", err, s.ref.Namespace, s.ref.Name)
	}
}

func orDash(v string) string {
	if v == "" {
		return "-"
	}
	return v
}

func deref[T any](p *T) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}
