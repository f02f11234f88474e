// Package agentfake is an in-memory dispatch-k8s agent for the tests of a supervisor written against
// agent.Interface. It keeps the API's contract as docs/api.md states it: the phases a TrainJob goes through,
// which operation is legal in which phase and what it answers (outcomes, A raised by Open and Release), and
// the error kinds (errors.Is matches agent.ErrNotFound, agent.ErrConflict, ...). It runs nothing: a job
// opened and not held is Running at once, with one pod, until Complete, Fail or Stop.
//
// What a cluster does by itself is the test's to play: Complete and Fail end a job, Linger keeps a stopping pod
// of a plain-mode job (Open and Release then answer ErrConflict until LetGo), SetObserveOnly makes a mode
// observe-only, Log writes rank 0's log, and Inject makes the next call of an operation fail (before or after
// taking effect, e.g. ErrOutcomeUnknown after a Start that happened).
package agentfake

import (
	"context"
	"fmt"
	"io"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/phpboyscout/dispatch-k8s/clients/go/agent"
)

// Agent is the in-memory agent. The zero value is not usable: New makes one. It is safe for concurrent use.
type Agent struct {
	mu      sync.Mutex
	jobs    map[string]*job // by namespace/name
	uids    int
	observe map[agent.Mode]string // observe-only modes, with their reason
	caps    *agent.Capabilities
	faults  map[string][]Fault
	now     func() time.Time
	calls   map[string]int
	// Watch's record: each job's phase as last reported, and the version at which it changed; the stopped.
	version  int
	reported map[string]watched // by uid
}

type watched struct {
	item    agent.ListItem
	changed int
}

var _ agent.Interface = (*Agent)(nil)

// New is an agent with no TrainJobs, no mode observe-only.
func New() *Agent {
	return &Agent{jobs: map[string]*job{}, observe: map[agent.Mode]string{}, faults: map[string][]Fault{},
		now: time.Now, calls: map[string]int{}, reported: map[string]watched{}}
}

type job struct {
	ref     agent.ObjectRef
	req     agent.StartRequest
	mode    agent.Mode
	opened  bool
	hold    *agent.HoldRecord
	a       int
	ended   agent.Phase
	lingers bool // plain mode: a pod of the previous execution is still stopping
	pod     string
	log     []string
	execs   []agent.Execution
}

// A Fault is what the next call of an operation does instead of answering: Err, returned before the call
// takes effect, or after it when Applied (a cut-off after the agent did it: agent.ErrOutcomeUnknown).
type Fault struct {
	Err     error
	Applied bool
}

// CutOff is the error of a call cut off after it was sent, as the client returns it (agent.ErrOutcomeUnknown).
func CutOff(op string) error { return &agent.CutOffError{Op: op, Err: io.ErrUnexpectedEOF} }

// Inject queues a fault for the next call of op ("start", "open", "hold", "release", "stop", "status",
// "list", "output", "preflight", "capabilities"); faults queued for one op are used in order.
func (f *Agent) Inject(op string, fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[op] = append(f.faults[op], fault)
}

// Calls is how many times op was called (faults included).
func (f *Agent) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// SetObserveOnly makes mode observe-only (reason non-empty) or not (reason empty): Start, Open and Release
// of a job of that mode answer agent.ErrObserveOnly, as the agent does once a Preflight of it failed.
func (f *Agent) SetObserveOnly(mode agent.Mode, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if reason == "" {
		delete(f.observe, mode)
	} else {
		f.observe[mode] = reason
	}
}

// Complete ends the job, Complete; Fail ends it, Failed. Its pod ends too.
func (f *Agent) Complete(ref agent.ObjectRef) error { return f.end(ref, agent.PhaseComplete) }

// Fail ends the job, Failed.
func (f *Agent) Fail(ref agent.ObjectRef) error { return f.end(ref, agent.PhaseFailed) }

func (f *Agent) end(ref agent.ObjectRef, phase agent.Phase) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, err := f.find("end", ref)
	if err != nil {
		return err
	}
	j.ended, j.pod = phase, ""
	return nil
}

// Linger keeps the job's pod stopping (a slow kubelet, a lost node) once its execution is held: in plain mode
// Open and Release answer agent.ErrConflict, naming it, until LetGo.
func (f *Agent) Linger(ref agent.ObjectRef) error {
	return f.with("linger", ref, func(j *job) { j.lingers = true })
}

// LetGo lets the lingering pod end.
func (f *Agent) LetGo(ref agent.ObjectRef) error {
	return f.with("let-go", ref, func(j *job) { j.lingers = false })
}

// Log appends lines to rank 0's log (Output).
func (f *Agent) Log(ref agent.ObjectRef, lines ...string) error {
	return f.with("log", ref, func(j *job) { j.log = append(j.log, lines...) })
}

func (f *Agent) with(op string, ref agent.ObjectRef, do func(*job)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, err := f.find(op, ref)
	if err == nil {
		do(j)
	}
	return err
}

// enter counts the call, honours ctx, and takes its fault, if any.
func (f *Agent) enter(ctx context.Context, op string) (after error, err error) {
	f.calls[op]++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if q := f.faults[op]; len(q) > 0 {
		f.faults[op] = q[1:]
		if q[0].Applied {
			return q[0].Err, nil
		}
		return nil, q[0].Err
	}
	return nil, nil
}

func key(namespace, name string) string { return namespace + "/" + name }

// find is the job of ref: not_found when none of that name, conflict when the name is another UID's (Status:
// not_found). As the agent, no refusal says the other object's uid.
func (f *Agent) find(op string, ref agent.ObjectRef) (*job, error) {
	j := f.jobs[key(ref.Namespace, ref.Name)]
	if j == nil {
		return nil, agent.NewError(op, "not_found", fmt.Sprintf("TrainJob %s/%s does not exist", ref.Namespace, ref.Name))
	}
	if j.ref.UID != ref.UID {
		if op == "status" {
			return nil, agent.NewError(op, "not_found", fmt.Sprintf("TrainJob %s/%s does not exist: the name now belongs to another object", ref.Namespace, ref.Name))
		}
		return nil, agent.NewError(op, "conflict", fmt.Sprintf("TrainJob %s/%s is a different object of the same name (not uid %s)", ref.Namespace, ref.Name, ref.UID))
	}
	return j, nil
}

func (f *Agent) observeOnly(op string, mode agent.Mode) error {
	if reason, ok := f.observe[mode]; ok {
		return agent.NewError(op, "observe_only", fmt.Sprintf("%s mode is observe-only: %s", mode, reason))
	}
	return nil
}

func modeOf(kueue *agent.KueueSpec) agent.Mode {
	if kueue != nil {
		return agent.ModeKueue
	}
	return agent.ModePlain
}

// Preflight proves the gates of the request's mode: it passes unless the mode is observe-only.
func (f *Agent) Preflight(ctx context.Context, req agent.PreflightRequest, _ ...agent.CallOption) (*agent.Capabilities, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	after, err := f.enter(ctx, "preflight")
	if err != nil {
		return nil, err
	}
	if req.Namespace == "" || req.Runtime.Name == "" {
		return nil, invalid("preflight", "namespace", "namespace and runtime are required")
	}
	mode := modeOf(req.Kueue)
	reason, observe := f.observe[mode]
	caps := &agent.Capabilities{Mode: mode, ObserveOnly: observe, ObserveOnlyReason: reason, StartGate: !observe,
		StartGateReason: "the probe stayed closed", ReadmissionGate: mode == agent.ModeKueue && !observe,
		Trainer: true, TrainerReason: "v2.2.1", Versions: map[string][]string{"trainer.kubeflow.org": {"v1alpha1"}}}
	if mode == agent.ModeKueue {
		caps.ReadmissionGateReason = "the readmission controller renews its Lease"
		caps.LeaseRenewed = f.now()
	} else {
		caps.ReadmissionGateReason = "plain mode: the agent keeps the rule itself"
	}
	f.caps = caps
	copied := *caps
	return done(&copied, after)
}

// Capabilities is the last Preflight's report.
func (f *Agent) Capabilities(ctx context.Context, _ ...agent.CallOption) (*agent.Capabilities, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	after, err := f.enter(ctx, "capabilities")
	if err != nil {
		return nil, err
	}
	if f.caps == nil {
		return done(&agent.Capabilities{ObserveOnly: true, ObserveOnlyReason: "no Preflight yet"}, after)
	}
	copied := *f.caps
	return done(&copied, after)
}

func invalid(op, field, message string) error {
	e := agent.NewError(op, "invalid", message)
	e.Field = field
	return e
}

// Start creates the TrainJob closed (Gated); the same request again answers the same one.
func (f *Agent) Start(ctx context.Context, req agent.StartRequest, _ ...agent.CallOption) (*agent.StartResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	after, err := f.enter(ctx, "start")
	if err != nil {
		return nil, err
	}
	switch {
	case agent.ValidJobID(req.JobID) != nil:
		return nil, invalid("start", "jobId", agent.ValidJobID(req.JobID).Error())
	case req.N < 0 || req.N >= 1_000_000:
		return nil, invalid("start", "n", "n: must be at least 0 and less than 1000000")
	case req.Namespace == "":
		return nil, invalid("start", "namespace", "namespace: required")
	case req.Runtime.Name == "":
		return nil, invalid("start", "runtime", "runtime: required")
	case req.Image == "":
		return nil, invalid("start", "image", "image: required")
	case len(req.Command) == 0:
		return nil, invalid("start", "command", "command: required")
	}
	mode := modeOf(req.Kueue)
	if err := f.observeOnly("start", mode); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("dj-%s-s%d", strings.ToLower(req.JobID), req.N)
	if j := f.jobs[key(req.Namespace, name)]; j != nil {
		if !sameRequest(j.req, req) {
			return nil, agent.NewError("start", "conflict", fmt.Sprintf("TrainJob %s/%s exists and is not this request's", req.Namespace, name))
		}
		if j.opened {
			return nil, agent.NewError("start", "conflict", fmt.Sprintf("TrainJob %s/%s has been opened since Start created it", req.Namespace, name))
		}
		out := &agent.StartResponse{Namespace: j.ref.Namespace, Name: j.ref.Name, UID: j.ref.UID}
		return done(out, after)
	}
	f.uids++
	j := &job{ref: agent.ObjectRef{Namespace: req.Namespace, Name: name, UID: fmt.Sprintf("00000000-0000-4000-8000-%012d", f.uids)},
		req: req, mode: mode}
	f.jobs[key(req.Namespace, name)] = j
	return done(&agent.StartResponse{Namespace: j.ref.Namespace, Name: j.ref.Name, UID: j.ref.UID}, after)
}

func sameRequest(a, b agent.StartRequest) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b) // every field, pointers' values included
}

// run starts a new execution: A raised, one pod.
func (j *job) run() {
	j.a++
	j.pod = fmt.Sprintf("%s-node-0-0-%05d", j.ref.Name, j.a)
	j.execs = append(j.execs, agent.Execution{A: j.a, J: 0, R: agent.Ptr(j.a), Pods: []string{j.pod}})
}

func (j *job) waiting(op string) error {
	if j.lingers {
		return agent.NewError(op, "conflict", fmt.Sprintf("waiting for 1 pod(s) of the previous execution that may "+
			"still run: %s-node-0-0-%05d: Terminating; nothing was written: retry once they are gone", j.ref.Name, j.a))
	}
	return nil
}

// Open lets the job past its gate (legal while Gated; an open job answers agent.OutcomeAlreadyOpen).
func (f *Agent) Open(ctx context.Context, ref agent.ObjectRef, _ ...agent.CallOption) (*agent.OpenResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	after, err := f.enter(ctx, "open")
	if err != nil {
		return nil, err
	}
	j, err := f.find("open", ref)
	if err != nil {
		return nil, err
	}
	if j.opened {
		return done(&agent.OpenResponse{Outcome: agent.OutcomeAlreadyOpen, HeldBy: []string{}}, after)
	}
	if j.ended != "" {
		return nil, agent.NewError("open", "rejected", fmt.Sprintf("the TrainJob ended (%s) without ever being opened", j.ended))
	}
	if err := f.observeOnly("open", j.mode); err != nil {
		return nil, err
	}
	out := &agent.OpenResponse{HeldBy: []string{}}
	switch {
	case j.mode == agent.ModeKueue && j.hold != nil:
		out.Outcome = agent.OutcomeGateRemovedHeld
	case j.mode == agent.ModeKueue:
		out.Outcome = agent.OutcomeGateRemoved
		j.run() // Kueue admits at once here; the real A is raised in Kueue's unsuspend
	case j.hold != nil:
		out.Outcome = agent.OutcomeOpenedHeld
	default:
		if err := j.waiting("open"); err != nil {
			return nil, err
		}
		out.Outcome = agent.OutcomeOpened
		j.run()
		out.A = agent.Ptr(j.a)
	}
	j.opened = true
	return done(out, after)
}

// Hold holds the job (legal until it ended, before Open too, and while observe-only).
func (f *Agent) Hold(ctx context.Context, ref agent.ObjectRef, req agent.HoldRequest, _ ...agent.CallOption) (*agent.OutcomeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	after, err := f.enter(ctx, "hold")
	if err != nil {
		return nil, err
	}
	if req.Who == "" || req.Reason == "" {
		return nil, invalid("hold", "who", "who and reason are required")
	}
	j, err := f.find("hold", ref)
	if err != nil {
		return nil, err
	}
	if j.ended != "" {
		return nil, agent.NewError("hold", "rejected", fmt.Sprintf("the TrainJob has ended (%s): there is nothing to hold", j.ended))
	}
	j.hold = &agent.HoldRecord{Instance: agent.NewJobID(), Since: f.now().UTC().Truncate(time.Second), Who: req.Who,
		Reason: req.Reason, Until: req.Until}
	if j.pod != "" && !j.lingers {
		j.pod = ""
	}
	if j.mode == agent.ModeKueue {
		return done(&agent.OutcomeResponse{Outcome: agent.OutcomeHeldWorkload}, after)
	}
	return done(&agent.OutcomeResponse{Outcome: agent.OutcomeHeldSuspended}, after)
}

// Release lifts the hold; a job not held answers agent.OutcomeNotHeld.
func (f *Agent) Release(ctx context.Context, ref agent.ObjectRef, _ ...agent.CallOption) (*agent.OutcomeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	after, err := f.enter(ctx, "release")
	if err != nil {
		return nil, err
	}
	j, err := f.find("release", ref)
	if err != nil {
		return nil, err
	}
	if err := f.observeOnly("release", j.mode); err != nil {
		return nil, err
	}
	if j.hold == nil {
		return done(&agent.OutcomeResponse{Outcome: agent.OutcomeNotHeld}, after)
	}
	if j.mode == agent.ModeKueue {
		j.hold = nil
		if j.opened && j.ended == "" {
			j.run()
		}
		return done(&agent.OutcomeResponse{Outcome: agent.OutcomeReleasedWorkload}, after)
	}
	if !j.opened || j.ended != "" {
		j.hold = nil
		return done(&agent.OutcomeResponse{Outcome: agent.OutcomeReleasedStaysClosed}, after)
	}
	if err := j.waiting("release"); err != nil {
		return nil, err
	}
	j.hold = nil
	j.run()
	return done(&agent.OutcomeResponse{Outcome: agent.OutcomeReleasedUnsuspended, A: agent.Ptr(j.a)}, after)
}

// Stop deletes the job (legal in every phase); gone already is agent.OutcomeAlreadyGone. Here it is gone at
// once: Status then answers agent.ErrNotFound.
func (f *Agent) Stop(ctx context.Context, ref agent.ObjectRef, _ ...agent.CallOption) (*agent.OutcomeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	after, err := f.enter(ctx, "stop")
	if err != nil {
		return nil, err
	}
	j, err := f.find("stop", ref)
	if agent.IsKind(err, "not_found") {
		return done(&agent.OutcomeResponse{Outcome: agent.OutcomeAlreadyGone}, after)
	}
	if err != nil {
		return nil, err
	}
	delete(f.jobs, key(j.ref.Namespace, j.ref.Name))
	return done(&agent.OutcomeResponse{Outcome: agent.OutcomeStopping}, after)
}

func (j *job) item() agent.ListItem {
	return agent.ListItem{Namespace: j.ref.Namespace, Name: j.ref.Name, UID: j.ref.UID, JobID: j.req.JobID,
		N: agent.Ptr(j.req.N), Phase: j.phase(), Orphan: j.ref.Namespace + "/trainjob/" + j.ref.Name}
}

// Watch answers as the agent: a snapshot without a Version, else the jobs whose phase changed since (a stopped
// one PhaseDeleted), waiting up to req.Wait for one; a Version it never answered is agent.ErrExpired.
func (f *Agent) Watch(ctx context.Context, req agent.WatchRequest, _ ...agent.CallOption) (*agent.WatchResponse, error) {
	deadline := time.Now().Add(req.Wait)
	first := true
	for {
		answer, after, err := f.watchOnce(ctx, req, first)
		first = false
		if err != nil || len(answer.Items) > 0 || req.Version == "" || !time.Now().Before(deadline) {
			if err != nil {
				return nil, err
			}
			return done(answer, after)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (f *Agent) watchOnce(ctx context.Context, req agent.WatchRequest, first bool) (*agent.WatchResponse, error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var after error
	if first {
		var err error
		if after, err = f.enter(ctx, "watch"); err != nil {
			return nil, nil, err
		}
	} else if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if req.Namespace == "" {
		return nil, nil, invalid("watch", "namespace", "namespace: required")
	}
	since := -1
	if req.Version != "" {
		n, err := strconv.Atoi(req.Version)
		if err != nil || n < 0 || n > f.version {
			e := agent.NewError("watch", "expired", fmt.Sprintf("version %q is not one this agent answered: watch again without a version", req.Version))
			e.Field = "version"
			return nil, nil, e
		}
		since = n
	}
	f.record()
	items := []agent.ListItem{}
	for _, w := range f.reported {
		if w.item.Namespace != req.Namespace {
			continue
		}
		if (since < 0 && w.item.Phase != agent.PhaseDeleted) || (since >= 0 && w.changed > since) {
			items = append(items, w.item)
		}
	}
	slices.SortFunc(items, func(a, b agent.ListItem) int { return strings.Compare(a.Name, b.Name) })
	return &agent.WatchResponse{Items: items, Version: strconv.Itoa(f.version)}, after, nil
}

// record notes each job whose phase changed since it was last reported, and each stopped one, at a new version.
func (f *Agent) record() {
	present := map[string]bool{}
	for _, j := range f.jobs {
		present[j.ref.UID] = true
		item := j.item()
		if w, ok := f.reported[j.ref.UID]; !ok || w.item.Phase != item.Phase {
			f.version++
			f.reported[j.ref.UID] = watched{item: item, changed: f.version}
		}
	}
	for uid, w := range f.reported {
		if !present[uid] && w.item.Phase != agent.PhaseDeleted {
			w.item.Phase = agent.PhaseDeleted
			f.version++
			f.reported[uid] = watched{item: w.item, changed: f.version}
		}
	}
}

func (j *job) phase() agent.Phase {
	switch {
	case j.ended != "":
		return j.ended
	case !j.opened:
		return agent.PhaseGated
	case j.hold != nil:
		return agent.PhaseHeld
	default:
		return agent.PhaseRunning
	}
}

// Status is the job as the agent reports it.
func (f *Agent) Status(ctx context.Context, ref agent.ObjectRef, _ ...agent.CallOption) (*agent.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	after, err := f.enter(ctx, "status")
	if err != nil {
		return nil, err
	}
	j, err := f.find("status", ref)
	if err != nil {
		return nil, err
	}
	s := &agent.Status{Namespace: j.ref.Namespace, Name: j.ref.Name, UID: j.ref.UID, Phase: j.phase(), Mode: j.mode,
		Gate: agent.GateClosed, HeldBy: []string{}, Executions: slices.Clone(j.execs), Pods: []agent.PodStatus{},
		Foreign: []string{}, Orphans: []string{}}
	if j.opened {
		s.Gate = agent.GateOpen
	}
	if j.a > 0 {
		s.A, s.Floor, s.J, s.R = agent.Ptr(j.a), agent.Ptr(j.a), agent.Ptr(0), agent.Ptr(j.a)
	}
	if j.mode == agent.ModeKueue {
		s.CheckState = agent.CheckPending
		if j.phase() == agent.PhaseRunning {
			s.CheckState = agent.CheckReady
		}
	}
	if j.hold != nil {
		h := *j.hold
		h.Expired = !h.Until.IsZero() && f.now().After(h.Until)
		s.Hold = &h
	}
	switch {
	case j.pod != "" && j.phase() == agent.PhaseRunning:
		s.Pods = append(s.Pods, agent.PodStatus{Name: j.pod, Node: agent.Ptr("node-1"), Phase: agent.Ptr("Running"),
			Verdict: agent.VerdictRunning, MayStillRun: true, Reason: "running or about to", A: agent.Ptr(j.a), J: agent.Ptr(0)})
	case j.pod != "" || j.lingers:
		s.Pods = append(s.Pods, agent.PodStatus{Name: fmt.Sprintf("%s-node-0-0-%05d", j.ref.Name, j.a), Node: agent.Ptr("node-1"),
			Phase: agent.Ptr("Running"), Verdict: agent.VerdictRunning, MayStillRun: true, Reason: "Terminating: its processes may still run",
			A: agent.Ptr(j.a), J: agent.Ptr(0)})
	}
	switch {
	case len(s.Pods) > 0:
		s.CeasedReason = "a pod may still run"
	case j.phase() == agent.PhaseRunning:
		s.CeasedReason = "a new execution may start without a dispatch call"
	default:
		s.Ceased, s.CeasedReason = true, "no pod may run and none can start without a dispatch call"
	}
	return done(s, after)
}

// List yields the jobs of req.Namespace (by JobID when set), req.Limit a page.
func (f *Agent) List(ctx context.Context, req agent.ListRequest, opts ...agent.CallOption) iter.Seq2[*agent.ListResponse, error] {
	return func(yield func(*agent.ListResponse, error) bool) {
		for {
			page, err := f.page(ctx, req)
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(page, nil) || page.Continue == "" {
				return
			}
			req.Continue = page.Continue
		}
	}
}

func (f *Agent) page(ctx context.Context, req agent.ListRequest) (*agent.ListResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	after, err := f.enter(ctx, "list")
	if err != nil {
		return nil, err
	}
	if req.Namespace == "" {
		return nil, invalid("list", "namespace", "namespace: required")
	}
	var items []agent.ListItem
	for _, j := range f.jobs {
		if j.ref.Namespace != req.Namespace || (req.JobID != "" && j.req.JobID != req.JobID) {
			continue
		}
		items = append(items, j.item())
	}
	slices.SortFunc(items, func(a, b agent.ListItem) int { return strings.Compare(a.Name, b.Name) })
	start := 0
	if req.Continue != "" {
		n, err := strconv.Atoi(req.Continue)
		if err != nil || n < 0 || n > len(items) {
			return nil, invalid("list", "continue", "the continue token has expired: list again from the start")
		}
		start = n
	}
	end := len(items)
	if req.Limit > 0 {
		end = min(end, start+req.Limit)
	}
	out := &agent.ListResponse{Items: slices.Clone(items[start:end])}
	if out.Items == nil {
		out.Items = []agent.ListItem{}
	}
	if end < len(items) {
		out.Continue = strconv.Itoa(end)
	}
	return done(out, after)
}

// ListAll is every page of List.
func (f *Agent) ListAll(ctx context.Context, req agent.ListRequest, opts ...agent.CallOption) ([]agent.ListItem, error) {
	var items []agent.ListItem
	for page, err := range f.List(ctx, req, opts...) {
		if err != nil {
			return nil, err
		}
		items = append(items, page.Items...)
	}
	return items, nil
}

// Output is rank 0's log as Log wrote it; not_found while the job has no running pod. Follow reads what is
// there, then ends (the fake's container has ended).
func (f *Agent) Output(ctx context.Context, ref agent.ObjectRef, o agent.OutputOptions, _ ...agent.CallOption) (*agent.Output, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	after, err := f.enter(ctx, "output")
	if err != nil {
		return nil, err
	}
	j, err := f.find("output", ref)
	if err != nil {
		return nil, err
	}
	if j.pod == "" {
		return nil, agent.NewError("output", "not_found", fmt.Sprintf("TrainJob %s/%s has no rank 0 pod", ref.Namespace, ref.Name))
	}
	lines := j.log
	if o.TailLines != nil && *o.TailLines < len(lines) {
		lines = lines[len(lines)-*o.TailLines:]
	}
	text := ""
	if len(lines) > 0 {
		text = strings.Join(lines, "\n") + "\n"
	}
	return done(agent.NewOutput(j.pod, io.NopCloser(strings.NewReader(text))), after)
}

// done is the answer, or the fault that came after it took effect.
func done[T any](v *T, after error) (*T, error) {
	if after != nil {
		return nil, after
	}
	return v, nil
}
