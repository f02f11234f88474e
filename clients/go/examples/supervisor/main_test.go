package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/phpboyscout/dispatch-k8s/clients/go/agent"
	"github.com/phpboyscout/dispatch-k8s/clients/go/agent/agentfake"
)

func supervise(fake *agentfake.Agent) (*supervisor, *bytes.Buffer) {
	var out bytes.Buffer
	return &supervisor{api: fake, within: 5 * time.Second, out: &out, poll: time.Millisecond}, &out
}

func TestTheSupervisorRunsOneJobInEachMode(t *testing.T) {
	for _, queue := range []string{"team-a", ""} {
		fake := agentfake.New()
		s, out := supervise(fake)
		if err := s.run(context.Background(), job{namespace: "team-a", runtime: "dispatch-torch", queue: queue, image: "i:1"}); err != nil {
			t.Fatalf("queue %q: %s: %v\n%s", queue, s.step, err, out)
		}
		for _, step := range []string{"Preflight", "Start", "Open", "Hold", "Release", "Status", "Output", "Stop"} {
			if !regexp.MustCompile(`(?m)^` + step + `\b`).MatchString(out.String()) {
				t.Errorf("queue %q: no %s step:\n%s", queue, step, out)
			}
		}
		if !regexp.MustCompile(`(?m)^Release\s+Running\s.*\bA=2\b`).MatchString(out.String()) {
			t.Errorf("queue %q:\n%s", queue, out)
		}
		if s.ref != nil {
			t.Errorf("the job was stopped, yet recorded as running: %+v", s.ref)
		}
	}
}

func TestACutOffStartIsFoundThroughList(t *testing.T) {
	fake := agentfake.New()
	fake.Inject("start", agentfake.Fault{Err: agentfake.CutOff("start"), Applied: true})
	s, out := supervise(fake)
	if err := s.run(context.Background(), job{namespace: "team-a", runtime: "r", queue: "q", image: "i:1"}); err != nil {
		t.Fatalf("%s: %v\n%s", s.step, err, out)
	}
	if fake.Calls("start") != 1 || fake.Calls("list") != 1 || !bytes.Contains(out.Bytes(), []byte("List by JobID found")) {
		t.Fatalf("start %d, list %d:\n%s", fake.Calls("start"), fake.Calls("list"), out)
	}
	// Cut off before it happened: not found by List, so Start again (the same request).
	fake = agentfake.New()
	fake.Inject("start", agentfake.Fault{Err: agentfake.CutOff("start")})
	s, out = supervise(fake)
	if err := s.run(context.Background(), job{namespace: "team-a", runtime: "r", image: "i:1"}); err != nil || fake.Calls("start") != 2 {
		t.Fatalf("%v after %d Start(s)\n%s", err, fake.Calls("start"), out)
	}
}

func TestAConflictingReleaseIsRepeatedBoundedly(t *testing.T) {
	conflict := agent.NewError("release", "conflict", "waiting for 1 pod(s) of the previous execution that may still run")
	fake := agentfake.New()
	fake.Inject("release", agentfake.Fault{Err: conflict})
	fake.Inject("release", agentfake.Fault{Err: conflict})
	s, out := supervise(fake)
	if err := s.run(context.Background(), job{namespace: "team-a", runtime: "r", image: "i:1"}); err != nil || fake.Calls("release") != 3 {
		t.Fatalf("%v after %d Release(s)\n%s", err, fake.Calls("release"), out)
	}
	// A conflict that does not go: the step fails once -within has passed, naming it.
	fake = agentfake.New()
	for range 10000 {
		fake.Inject("release", agentfake.Fault{Err: conflict})
	}
	s, out = supervise(fake)
	s.within = 50 * time.Millisecond
	err := s.run(context.Background(), job{namespace: "team-a", runtime: "r", image: "i:1"})
	if s.step != "Release" || !errors.Is(err, context.DeadlineExceeded) || !bytes.Contains([]byte(err.Error()), []byte("waiting for 1 pod")) {
		t.Fatalf("%s: %v\n%s", s.step, err, out)
	}
}

func TestAnInterruptionEndsTheWaitAtOnce(t *testing.T) {
	fake := agentfake.New()
	s, _ := supervise(fake)
	started, err := fake.Start(context.Background(), agent.StartRequest{JobID: agent.NewJobID(), N: 1, Namespace: "team-a",
		Runtime: agent.RuntimeRef{Name: "r"}, Image: "i:1", Command: []string{"train"}})
	if err != nil {
		t.Fatal(err)
	}
	s.within, s.poll = time.Hour, time.Hour // a wait that would last an hour
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	began := time.Now()
	_, err = s.await(ctx, started.Ref(), "never", func(*agent.Status) bool { return false })
	if !errors.Is(err, context.Canceled) || time.Since(began) > 10*time.Second {
		t.Fatalf("%v after %s", err, time.Since(began))
	}
}
