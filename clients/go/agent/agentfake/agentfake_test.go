package agentfake_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/phpboyscout/dispatch-k8s/clients/go/agent"
	"github.com/phpboyscout/dispatch-k8s/clients/go/agent/agentfake"
)

func request(kueue bool) agent.StartRequest {
	req := agent.StartRequest{JobID: agent.NewJobID(), N: 1, Namespace: "team-a", Runtime: agent.RuntimeRef{Name: "dispatch-torch"},
		Image: "registry.example/train:1", Command: []string{"python", "train.py"}}
	if kueue {
		req.Kueue = &agent.KueueSpec{LocalQueue: "team-a"}
	}
	return req
}

// ok is v, or a panic (failing the test) on err.
func ok[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func phase(f *agentfake.Agent, ref agent.ObjectRef) agent.Phase {
	return ok(f.Status(context.Background(), ref)).Phase
}

func TestAJobGoesThroughItsPhases(t *testing.T) {
	ctx := context.Background()
	for _, kueue := range []bool{true, false} {
		f := agentfake.New()
		req := request(kueue)
		started := ok(f.Start(ctx, req))
		ref := started.Ref()
		if again := ok(f.Start(ctx, req)); *again != *started {
			t.Fatalf("Start again: %+v", again)
		}
		s := ok(f.Status(ctx, ref))
		if s.Phase != agent.PhaseGated || s.Gate != agent.GateClosed || !s.Ceased || s.A != nil {
			t.Fatalf("%+v", s)
		}
		opened := ok(f.Open(ctx, ref))
		if kueue && opened.Outcome != agent.OutcomeGateRemoved || !kueue && (opened.Outcome != agent.OutcomeOpened || *opened.A != 1) {
			t.Fatalf("%+v", opened)
		}
		if again := ok(f.Open(ctx, ref)); again.Outcome != agent.OutcomeAlreadyOpen {
			t.Fatalf("%+v", again)
		}
		if s := ok(f.Status(ctx, ref)); s.Phase != agent.PhaseRunning || *s.A != 1 || len(s.Pods) != 1 || s.Ceased {
			t.Fatalf("%+v", s)
		}
		ok(f.Hold(ctx, ref, agent.HoldRequest{Who: "ops", Reason: "drain", Until: time.Now().Add(time.Hour)}))
		if s := ok(f.Status(ctx, ref)); s.Phase != agent.PhaseHeld || s.Hold == nil || s.Hold.Who != "ops" || !s.Ceased {
			t.Fatalf("%+v", s)
		}
		released := ok(f.Release(ctx, ref))
		if kueue && released.Outcome != agent.OutcomeReleasedWorkload || !kueue && released.Outcome != agent.OutcomeReleasedUnsuspended {
			t.Fatalf("%+v", released)
		}
		if s := ok(f.Status(ctx, ref)); s.Phase != agent.PhaseRunning || *s.A != 2 {
			t.Fatalf("A raised by Release: %+v", s)
		}
		if again := ok(f.Release(ctx, ref)); again.Outcome != agent.OutcomeNotHeld {
			t.Fatalf("%+v", again)
		}
		noErr(t, f.Complete(ref))
		if _, err := f.Hold(ctx, ref, agent.HoldRequest{Who: "ops", Reason: "late"}); !errors.Is(err, agent.ErrRejected) {
			t.Fatalf("Hold of an ended job: %v", err)
		}
		if stopped := ok(f.Stop(ctx, ref)); stopped.Outcome != agent.OutcomeStopping {
			t.Fatalf("%+v", stopped)
		}
		if again := ok(f.Stop(ctx, ref)); again.Outcome != agent.OutcomeAlreadyGone {
			t.Fatalf("%+v", again)
		}
		if _, err := f.Status(ctx, ref); !errors.Is(err, agent.ErrNotFound) {
			t.Fatalf("%v", err)
		}
	}
}

func TestAHoldBeforeOpenSurvivesIt(t *testing.T) {
	ctx := context.Background()
	for kueue, want := range map[bool]agent.Outcome{true: agent.OutcomeGateRemovedHeld, false: agent.OutcomeOpenedHeld} {
		f := agentfake.New()
		ref := ok(f.Start(ctx, request(kueue))).Ref()
		ok(f.Hold(ctx, ref, agent.HoldRequest{Who: "ops", Reason: "window"}))
		if opened := ok(f.Open(ctx, ref)); opened.Outcome != want {
			t.Fatalf("%+v", opened)
		}
		if p := phase(f, ref); p != agent.PhaseHeld {
			t.Fatal(p)
		}
	}
}

func TestTheErrorsAreTheAPIs(t *testing.T) {
	ctx := context.Background()
	f := agentfake.New()
	req := request(false)
	ref := ok(f.Start(ctx, req)).Ref()
	other := ref
	other.UID = "another"
	if _, err := f.Open(ctx, other); !errors.Is(err, agent.ErrConflict) {
		t.Errorf("another uid: %v", err)
	}
	if _, err := f.Status(ctx, other); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("Status of another uid: %v", err)
	}
	changed := req
	changed.Image = "another:1"
	if _, err := f.Start(ctx, changed); !errors.Is(err, agent.ErrConflict) {
		t.Errorf("another request of the name: %v", err)
	}
	bad := request(false)
	bad.JobID = "01jdq7z9v3k8m2n4p6r8t0w2y4"
	var e *agent.Error
	if _, err := f.Start(ctx, bad); !errors.Is(err, agent.ErrInvalid) || !errors.As(err, &e) || e.Field != "jobId" {
		t.Errorf("a lower-case JobID: %v", err)
	}
	if _, err := f.Output(ctx, ref, agent.OutputOptions{}); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("Output of a gated job: %v", err)
	}
	f.SetObserveOnly(agent.ModePlain, "the probe's pod ran")
	if _, err := f.Open(ctx, ref); !errors.Is(err, agent.ErrObserveOnly) {
		t.Errorf("Open while observe-only: %v", err)
	}
	if _, err := f.Hold(ctx, ref, agent.HoldRequest{Who: "ops", Reason: "r"}); err != nil {
		t.Errorf("Hold goes on while observe-only: %v", err)
	}
	caps := ok(f.Preflight(ctx, agent.PreflightRequest{Namespace: "team-a", Runtime: agent.RuntimeRef{Name: "r"}}))
	if !caps.ObserveOnly || caps.Mode != agent.ModePlain {
		t.Errorf("%+v", caps)
	}
	f.SetObserveOnly(agent.ModePlain, "")
	ok(f.Open(ctx, ref))
	noErr(t, f.Complete(ref))
	ended := ok(f.Start(ctx, request(true))).Ref()
	noErr(t, f.Fail(ended))
	if _, err := f.Open(ctx, ended); !errors.Is(err, agent.ErrRejected) {
		t.Errorf("Open of a job that ended unopened: %v", err)
	}
}

func TestAPlainModeReleaseWaitsForALingeringPod(t *testing.T) {
	ctx := context.Background()
	f := agentfake.New()
	ref := ok(f.Start(ctx, request(false))).Ref()
	ok(f.Open(ctx, ref))
	noErr(t, f.Linger(ref))
	ok(f.Hold(ctx, ref, agent.HoldRequest{Who: "ops", Reason: "drain"}))
	if s := ok(f.Status(ctx, ref)); len(s.Pods) != 1 || !s.Pods[0].MayStillRun || s.Ceased {
		t.Fatalf("%+v", s)
	}
	if _, err := f.Release(ctx, ref); !errors.Is(err, agent.ErrConflict) {
		t.Fatalf("%v", err)
	}
	noErr(t, f.LetGo(ref))
	if r := ok(f.Release(ctx, ref)); r.A == nil || *r.A != 2 {
		t.Fatalf("%+v", r)
	}
}

func TestFaultsAndListAndOutput(t *testing.T) {
	ctx := context.Background()
	f := agentfake.New()
	req := request(true)
	f.Inject("start", agentfake.Fault{Err: agentfake.CutOff("start"), Applied: true})
	if _, err := f.Start(ctx, req); !errors.Is(err, agent.ErrOutcomeUnknown) {
		t.Fatalf("%v", err)
	}
	// The Start took effect: List by JobID finds it, and the same Start answers it.
	items := ok(f.ListAll(ctx, agent.ListRequest{Namespace: "team-a", JobID: req.JobID}))
	if len(items) != 1 || items[0].Phase != agent.PhaseGated {
		t.Fatalf("%+v", items)
	}
	if again := ok(f.Start(ctx, req)); again.Ref() != items[0].Ref() {
		t.Fatalf("%+v %+v", again, items[0])
	}
	for n := 2; n <= 3; n++ {
		r := req
		r.N = n
		ok(f.Start(ctx, r))
	}
	pages := 0
	for page, err := range f.List(ctx, agent.ListRequest{Namespace: "team-a", Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		pages++
		_ = page
	}
	if pages != 2 || f.Calls("list") != 3 {
		t.Fatalf("%d pages, %d calls", pages, f.Calls("list"))
	}
	ref := items[0].Ref()
	ok(f.Open(ctx, ref))
	noErr(t, f.Log(ref, "step 1", "step 2", "step 3"))
	out := ok(f.Output(ctx, ref, agent.OutputOptions{TailLines: agent.Ptr(2)}))
	if text := ok(io.ReadAll(out)); string(text) != "step 2\nstep 3\n" || out.Pod == "" {
		t.Fatalf("%q from %q", text, out.Pod)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.Status(cancelled, ref); !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
}

func TestWatchReportsEachChangeOnceAndAStoppedJobGone(t *testing.T) {
	ctx := context.Background()
	f := agentfake.New()
	ref := ok(f.Start(ctx, request(false))).Ref()
	snapshot := ok(f.Watch(ctx, agent.WatchRequest{Namespace: "team-a"}))
	if len(snapshot.Items) != 1 || snapshot.Items[0].Phase != agent.PhaseGated {
		t.Fatalf("snapshot %+v", snapshot)
	}
	quiet := ok(f.Watch(ctx, agent.WatchRequest{Namespace: "team-a", Version: snapshot.Version, Wait: 50 * time.Millisecond}))
	if len(quiet.Items) != 0 {
		t.Fatalf("nothing changed, yet %+v", quiet)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		ok(f.Open(ctx, ref))
	}()
	opened := ok(f.Watch(ctx, agent.WatchRequest{Namespace: "team-a", Version: quiet.Version, Wait: 5 * time.Second}))
	if len(opened.Items) != 1 || opened.Items[0].Phase != agent.PhaseRunning {
		t.Fatalf("after Open %+v", opened)
	}
	ok(f.Stop(ctx, ref))
	gone := ok(f.Watch(ctx, agent.WatchRequest{Namespace: "team-a", Version: opened.Version}))
	if len(gone.Items) != 1 || gone.Items[0].Phase != agent.PhaseDeleted || gone.Items[0].Ref() != ref {
		t.Fatalf("after Stop %+v", gone)
	}
	if again := ok(f.Watch(ctx, agent.WatchRequest{Namespace: "team-a"})); len(again.Items) != 0 {
		t.Fatalf("a snapshot lists the stopped job: %+v", again)
	}
	if _, err := f.Watch(ctx, agent.WatchRequest{Namespace: "team-a", Version: "99"}); !errors.Is(err, agent.ErrExpired) {
		t.Fatalf("a version never answered: %v", err)
	}
}

func TestChangesFollowsAJobToItsEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f := agentfake.New()
	ref := ok(f.Start(ctx, request(true))).Ref()
	go func() {
		time.Sleep(20 * time.Millisecond)
		ok(f.Open(ctx, ref))
		noErr(t, f.Complete(ref))
	}()
	var phases []agent.Phase
	version := ""
	for len(phases) == 0 || phases[len(phases)-1] != agent.PhaseComplete {
		answer := ok(f.Watch(ctx, agent.WatchRequest{Namespace: "team-a", Version: version, Wait: time.Second}))
		for _, item := range answer.Items {
			phases = append(phases, item.Phase)
		}
		version = answer.Version
	}
	if phases[0] != agent.PhaseGated {
		t.Fatalf("phases %v", phases)
	}
}
