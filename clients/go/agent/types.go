package agent

import "time"

// The API's requests and answers. They are this package's own types: the generated ones (internal/wire,
// made from the agent's OpenAPI document) stay internal and every request and answer is converted at the
// edge, by the JSON names both share (TestEveryWireFieldIsCarried checks that every field of the document is
// here, with the same name). Enumerations are typed strings with their values as constants; timestamps are
// time.Time (the zero time: none). A field the document marks nullable or optional that has no such zero is a
// pointer; Ptr makes one.

// ObjectRef names one TrainJob: its namespace and name, and the UID Start returned (an object of the same
// name but another UID is refused). Every call about one TrainJob takes one: from StartResponse.Ref, or
// ListItem.Ref after a restart.
type ObjectRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// Phase is a TrainJob's phase, as Status and List report it (docs/api.md, "Go client").
type Phase string

// The phases. Gated: created, never opened (Start's answer). Queued and Admitting (Kueue mode): opened,
// waiting for quota, then for dispatch's check. Running: unsuspended (pods may run). Held: dispatch's hold.
// Suspended (plain mode): suspended by someone else. Complete, Failed: ended. Unknown: List could not read it.
const (
	PhaseGated     Phase = "Gated"
	PhaseQueued    Phase = "Queued"
	PhaseAdmitting Phase = "Admitting"
	PhaseRunning   Phase = "Running"
	PhaseHeld      Phase = "Held"
	PhaseSuspended Phase = "Suspended"
	PhaseComplete  Phase = "Complete"
	PhaseFailed    Phase = "Failed"
	PhaseUnknown   Phase = "Unknown"
	PhaseDeleted   Phase = "Deleted"
)

// Ended says the TrainJob ended (Complete or Failed): Open, Hold and Release of it are refused (rejected).
func (p Phase) Ended() bool { return p == PhaseComplete || p == PhaseFailed }

// Outcome is what a write did (Open, Hold, Release, Stop). A newer agent may answer an outcome not listed
// here; compare with the constants, and treat another value as success all the same (it is not an error).
type Outcome string

// The outcomes of Open, Hold, Release and Stop (agent/domain/operations.py).
const (
	OutcomeOpened              Outcome = "opened"                           // plain mode: unsuspended, A raised
	OutcomeOpenedHeld          Outcome = "opened; held until Release"       // plain mode, a hold placed before Open
	OutcomeGateRemoved         Outcome = "gate removed"                     // Kueue mode
	OutcomeGateRemovedHeld     Outcome = "gate removed; held until Release" // Kueue mode, a hold placed before Open
	OutcomeAlreadyOpen         Outcome = "already past its gate"
	OutcomeOpenedMarkWritten   Outcome = "opened mark written"
	OutcomeHeldWorkload        Outcome = "held: Workload deactivated"
	OutcomeHeldSuspended       Outcome = "held: TrainJob suspended"
	OutcomeHeldMultiKueue      Outcome = "held: evicted through MultiKueue; the Workload is deactivated once it stops"
	OutcomeReleasedWorkload    Outcome = "released: Workload reactivated"
	OutcomeReleasedTrainJob    Outcome = "released: hold lifted from the TrainJob (its Workload was active)"
	OutcomeReleasedUnsuspended Outcome = "released: TrainJob unsuspended"
	OutcomeReleasedStaysClosed Outcome = "hold lifted; the TrainJob stays closed"
	OutcomeNotHeld             Outcome = "not held"
	OutcomeStopping            Outcome = "stopping"
	OutcomeAlreadyGone         Outcome = "already gone"
)

// Verdict is what became of a pod (agent/domain/node_loss.py); PodStatus.MayStillRun follows from it.
type Verdict string

// The verdicts. Ended, NotScheduled and Ceased are the ones whose pod certainly runs no more.
const (
	VerdictRunning      Verdict = "Running"
	VerdictEnded        Verdict = "Ended"
	VerdictNotScheduled Verdict = "NotScheduled"
	VerdictNodeLost     Verdict = "NodeLost"
	VerdictCeased       Verdict = "Ceased"
	VerdictTaintEvicted Verdict = "TaintEvicted"
	VerdictPreempted    Verdict = "Preempted"
	VerdictEvicted      Verdict = "Evicted"
	VerdictDeleted      Verdict = "Deleted"
)

// CheckState is the state of dispatch's AdmissionCheck on the Workload (Kueue mode).
type CheckState string

// Kueue's AdmissionCheck states.
const (
	CheckPending  CheckState = "Pending"
	CheckReady    CheckState = "Ready"
	CheckRetry    CheckState = "Retry"
	CheckRejected CheckState = "Rejected"
)

// Gate is whether the TrainJob is past dispatch's start gate.
type Gate string

// The gate's states.
const (
	GateOpen   Gate = "open"
	GateClosed Gate = "closed"
)

// Mode is how the agent gates a TrainJob: through Kueue, or by suspending it (plain).
type Mode string

// The modes.
const (
	ModeKueue Mode = "kueue"
	ModePlain Mode = "plain"
)

// RuntimeKind is the kind of runtime a StartRequest copies.
type RuntimeKind string

// The runtime kinds.
const (
	ClusterTrainingRuntime RuntimeKind = "ClusterTrainingRuntime"
	TrainingRuntime        RuntimeKind = "TrainingRuntime"
)

// PublishVia is how a StartRequest publishes the code.
type PublishVia string

// The ways to publish.
const (
	PublishViaImage         PublishVia = "image"
	PublishViaInitContainer PublishVia = "initContainer"
)

// JobID is dispatch's name for a job: a ULID in canonical form (26 characters of Crockford base32, upper
// case). NewJobID makes one.
type JobID = string

// RuntimeRef is the runtime Start copies (its kind defaults to ClusterTrainingRuntime).
type RuntimeRef struct {
	Name      string       `json:"name"`
	Kind      *RuntimeKind `json:"kind,omitempty"`
	Namespace *string      `json:"namespace,omitempty"`
}

// KueueSpec runs the TrainJob in Kueue mode, in this LocalQueue.
type KueueSpec struct {
	LocalQueue    string  `json:"localQueue"`
	PriorityClass *string `json:"priorityClass,omitempty"`
}

// CredentialSpec mounts a Secret into the trainer.
type CredentialSpec struct {
	Secret    string `json:"secret"`
	MountPath string `json:"mountPath"`
}

// PublishSpec says how the trainer gets the code.
type PublishSpec struct {
	Via           PublishVia `json:"via"`
	Image         *string    `json:"image,omitempty"`
	InitContainer *string    `json:"initContainer,omitempty"`
}

// StartRequest is Start's request (docs/api.md, POST /v1/start). JobID comes from NewJobID.
type StartRequest struct {
	JobID                 JobID             `json:"jobId"`
	N                     int               `json:"n"`
	G                     *int              `json:"g,omitempty"`
	Attempt               int               `json:"attempt"`
	Namespace             string            `json:"namespace"`
	Runtime               RuntimeRef        `json:"runtime"`
	Image                 string            `json:"image"`
	Command               []string          `json:"command"`
	Args                  []string          `json:"args,omitempty"`
	Env                   map[string]string `json:"env,omitempty"`
	WorkDir               *string           `json:"workDir,omitempty"`
	Credentials           []CredentialSpec  `json:"credentials,omitempty"`
	Publish               *PublishSpec      `json:"publish,omitempty"`
	Kueue                 *KueueSpec        `json:"kueue,omitempty"`
	ActiveDeadlineSeconds *int              `json:"activeDeadlineSeconds,omitempty"`
}

// StartResponse names the TrainJob Start created (or found, for the same request again).
type StartResponse struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// Ref is the TrainJob's reference, for every other call.
func (s *StartResponse) Ref() ObjectRef {
	return ObjectRef{Namespace: s.Namespace, Name: s.Name, UID: s.UID}
}

// OpenResponse is Open's answer.
type OpenResponse struct {
	Outcome Outcome `json:"outcome"`
	// HeldBy lists other parties' gates: held by an administrator.
	HeldBy []string `json:"heldBy"`
	// A is the new execution's A when Open raised it (plain mode).
	A *int `json:"a,omitempty"`
}

// HoldRequest says who holds the TrainJob and why; Until (optional, the zero time: until released) is
// reported, never acted on.
type HoldRequest struct {
	Who    string    `json:"who"`
	Reason string    `json:"reason"`
	Until  time.Time `json:"until,omitzero"`
}

// OutcomeResponse is the answer of Hold, Release and Stop.
type OutcomeResponse struct {
	Outcome Outcome `json:"outcome"`
	// A is the new execution's A when Release raised it (plain mode).
	A *int `json:"a,omitempty"`
	// Workers (Stop on a MultiKueue manager): what of the job is still on each worker.
	Workers []WorkerRemains `json:"workers,omitempty"`
}

// OutputOptions chooses what of rank 0's log Output streams.
type OutputOptions struct {
	// Follow keeps streaming until the container ends, the context ends or Close.
	Follow bool `json:"follow,omitempty"`
	// TailLines, when set, streams only the last lines (0: none before following).
	TailLines *int `json:"tailLines,omitempty"`
}

// Status is what the cluster shows of a TrainJob (docs/api.md, POST /v1/status).
type Status struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Phase     Phase  `json:"phase"`
	Mode      Mode   `json:"mode"`
	Gate      Gate   `json:"gate"`
	// HeldBy lists other parties' gates (never dispatch's own).
	HeldBy []string `json:"heldBy"`
	// CheckState and CheckMessage: dispatch's AdmissionCheck on the Workload (Kueue mode), else empty.
	CheckState   CheckState  `json:"checkState"`
	CheckMessage string      `json:"checkMessage"`
	A            *int        `json:"a"`
	Floor        *int        `json:"floor"`
	J            *int        `json:"j"`
	R            *int        `json:"r"`
	Executions   []Execution `json:"executions"`
	Pods         []PodStatus `json:"pods"`
	// Ceased: every process of the TrainJob is certainly gone and none can start without a dispatch call.
	Ceased       bool        `json:"ceased"`
	CeasedReason string      `json:"ceasedReason,omitempty"`
	Hold         *HoldRecord `json:"hold,omitempty"`
	Foreign      []string    `json:"foreign"`
	Orphans      []string    `json:"orphans"`
	// DeletionTimestamp is set once the TrainJob is being deleted (Stop); zero otherwise.
	DeletionTimestamp time.Time `json:"deletionTimestamp,omitzero"`
	// Cluster and ClusterReason: on a MultiKueue manager, the worker the job runs on, or why its pods are
	// not reported.
	Cluster       string          `json:"cluster,omitempty"`
	ClusterReason string          `json:"clusterReason,omitempty"`
	Workers       []WorkerRemains `json:"workers,omitempty"`
}

// Ref is the TrainJob's reference.
func (s *Status) Ref() ObjectRef { return ObjectRef{Namespace: s.Namespace, Name: s.Name, UID: s.UID} }

// Execution is one execution of the TrainJob (A, J, R) and its pods.
type Execution struct {
	A       int      `json:"a"`
	J       int      `json:"j"`
	R       *int     `json:"r"`
	Epoch   *int     `json:"epoch"`
	Attempt *string  `json:"attempt"`
	Pods    []string `json:"pods"`
}

// PodStatus is one pod of the TrainJob and its verdict.
type PodStatus struct {
	Name        string  `json:"name"`
	Node        *string `json:"node"`
	Phase       *string `json:"phase"` // the pod's own phase (Pending, Running, Succeeded, Failed)
	Verdict     Verdict `json:"verdict"`
	MayStillRun bool    `json:"mayStillRun"`
	Reason      string  `json:"reason"`
	A           *int    `json:"a"`
	J           *int    `json:"j"`
}

// HoldRecord is dispatch's hold as recorded on the TrainJob.
type HoldRecord struct {
	Instance string    `json:"instance"`
	Since    time.Time `json:"since,omitzero"`
	Who      string    `json:"who"`
	Reason   string    `json:"reason"`
	Until    time.Time `json:"until,omitzero"`
	// Expired: Until has passed; the hold stays until Release.
	Expired bool `json:"expired"`
}

// WorkerRemains is, on a MultiKueue manager, what of a job is left on one worker.
type WorkerRemains struct {
	Cluster     string   `json:"cluster"`
	Read        bool     `json:"read"`
	Fenced      *bool    `json:"fenced,omitempty"`
	MayStillRun bool     `json:"mayStillRun"`
	Orphans     []string `json:"orphans"`
	Reason      string   `json:"reason"`
}

// ListRequest chooses dispatch's TrainJobs to list.
type ListRequest struct {
	Namespace string `json:"namespace"`
	// JobID, when set, narrows to one JobID's TrainJobs (every N).
	JobID JobID `json:"jobId,omitempty"`
	// Limit is the page size (the API server's limit); 0: the agent's default.
	Limit int `json:"limit,omitempty"`
	// Continue is the first page's continue token, when resuming.
	Continue string `json:"continue,omitempty"`
}

// ListResponse is one page of List.
type ListResponse struct {
	Items    []ListItem `json:"items"`
	Continue string     `json:"continue,omitempty"`
}

// ListItem is one of dispatch's TrainJobs.
type ListItem struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// JobID and N, read from the name; empty and nil for a TrainJob dispatch's by its runtime patch only.
	JobID JobID `json:"jobId"`
	N     *int  `json:"n"`
	Phase Phase `json:"phase"`
	// Orphan is the item in the dispatch contract's orphan words (`<namespace>/trainjob/<name>`).
	Orphan            string    `json:"orphan"`
	DeletionTimestamp time.Time `json:"deletionTimestamp,omitzero"`
}

// Ref is the TrainJob's reference, for Status, Stop and the rest after a restart.
func (i ListItem) Ref() ObjectRef { return ObjectRef{Namespace: i.Namespace, Name: i.Name, UID: i.UID} }

// WatchRequest asks for the changes to dispatch's TrainJobs in a namespace.
type WatchRequest struct {
	Namespace string
	// Version is the previous answer's; empty: a snapshot of every dispatch TrainJob now, answered at once.
	Version string
	// Wait is how long the agent may wait for a change (whole seconds, at most a minute; 0: answer at once).
	// The client's timeout is extended by it.
	Wait time.Duration
}

// watchBody is WatchRequest as the agent reads it.
type watchBody struct {
	Namespace      string `json:"namespace"`
	Version        string `json:"version,omitempty"`
	TimeoutSeconds int    `json:"timeoutSeconds"`
}

// WatchResponse is what changed after the request's Version, each TrainJob as it is now (PhaseDeleted:
// gone); empty when the wait ended without a change. An item may repeat a phase already seen.
type WatchResponse struct {
	Items []ListItem `json:"items"`
	// Version is what to pass as WatchRequest.Version next.
	Version string `json:"version"`
}

// PreflightRequest proves the gates of one mode (Kueue when Kueue is set, else plain).
type PreflightRequest struct {
	Namespace string     `json:"namespace"`
	Runtime   RuntimeRef `json:"runtime"`
	Kueue     *KueueSpec `json:"kueue,omitempty"`
}

// Capabilities is what the agent proved (Preflight) and reports (Capabilities).
type Capabilities struct {
	// Mode is the mode this report is about; empty before any Preflight.
	Mode Mode `json:"mode,omitempty"`
	// ObserveOnly: calls of this mode that may let something run (Start, Open, Release) are refused.
	ObserveOnly           bool                `json:"observeOnly"`
	ObserveOnlyReason     string              `json:"observeOnlyReason,omitempty"`
	StartGate             bool                `json:"startGate"`
	StartGateReason       string              `json:"startGateReason"`
	ReadmissionGate       bool                `json:"readmissionGate"`
	ReadmissionGateReason string              `json:"readmissionGateReason"`
	Trainer               bool                `json:"trainer"`
	TrainerReason         string              `json:"trainerReason"`
	Versions              map[string][]string `json:"versions"`
	// LeaseRenewed is the readmission controller's last heartbeat; zero when none.
	LeaseRenewed time.Time `json:"leaseRenewed,omitzero"`
}

// Ptr returns a pointer to v, for the optional fields: G: agent.Ptr(1), TailLines: agent.Ptr(20).
func Ptr[T any](v T) *T { return &v }
