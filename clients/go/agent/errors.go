package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The API's error kinds (docs/api.md, Errors), one sentinel each: test with errors.Is. The *Error
// behind them carries the agent's message and details.
var (
	// ErrInvalid: the request is malformed; Error.Field names what. Nothing was written. Fix the request.
	ErrInvalid = errors.New("invalid")
	// ErrUnauthenticated: no token, or the API server did not accept it (for the agent's audience). Also
	// returned, with nothing sent, when WithAudience is set and the token is not bound to that audience.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden: the caller lacks the right the message names. Nothing was read or written.
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound: the TrainJob (or rank 0's pod) does not exist; from Status also when the name now belongs
	// to another UID, with Error.Orphans.
	ErrNotFound = errors.New("not_found")
	// ErrRejected: the operation must not happen (a fence, Kueue not managing the TrainJob, admission
	// refused it, a TrainJob that is not dispatch's). Do not retry.
	ErrRejected = errors.New("rejected")
	// ErrConflict: the object is not as the request expects; nothing was written. Per call (each method's
	// documentation): Start, the name belongs to an earlier TrainJob (Error.Orphans) or another request;
	// Open, Hold, Release and Stop, the name belongs to another UID; Open and Release in plain mode, a pod of
	// the previous execution may still run (call again once it is gone, with a bound); Hold and Release in Kueue
	// mode, the Workload is not there; Open, Hold and Release, the objects kept changing under the write. Status, List, Output, Preflight and Capabilities never answer it. Re-read (Status) and decide.
	ErrConflict = errors.New("conflict")
	// ErrRateLimited: too many failed tokens from this address, too many followed Output streams, or too many
	// Watch calls waiting.
	// Nothing was read or written; Error.RetryAfter says when to try again.
	ErrRateLimited = errors.New("rate_limited")
	// ErrExpired: Watch's Version is older than the agent remembers, or not one it answered. Watch again
	// without a Version (a snapshot) and take it as the truth.
	ErrExpired = errors.New("expired")
	// ErrObserveOnly: the agent cannot prove the gates of the call's mode; Start, Open and Release refuse.
	// Fix the cluster and run Preflight in that mode.
	ErrObserveOnly = errors.New("observe_only")
	// ErrUnavailable: the API server could not be reached or failed, the agent lacks a permission, or the
	// agent could not be reached (then nothing was sent). Retry.
	ErrUnavailable = errors.New("unavailable")
	// ErrInternal: a bug in the agent, or an answer this client cannot read. Report it.
	ErrInternal = errors.New("internal")

	// ErrUnsupported: the agent does not serve this operation or API version (an older agent); see
	// Client.CheckAgent. Never ErrNotFound: a missing endpoint says nothing about a TrainJob.
	ErrUnsupported = errors.New("unsupported by this agent")

	// ErrOutcomeUnknown: the call was sent and then cut off (the connection closed or reset, a timeout, the
	// context ended) before its answer: it may or may not have taken effect. Either re-read to learn what
	// happened (Status; List by JobID after a Start) and decide, or repeat the same call, which is safe for
	// every operation (docs/api.md, "Repeating a call"). Always a *CutOffError; when the caller's context
	// ended it also matches context.Canceled or context.DeadlineExceeded.
	ErrOutcomeUnknown = errors.New("outcome unknown")
)

var kinds = map[string]error{
	"invalid":         ErrInvalid,
	"unauthenticated": ErrUnauthenticated,
	"forbidden":       ErrForbidden,
	"not_found":       ErrNotFound,
	"rejected":        ErrRejected,
	"conflict":        ErrConflict,
	"rate_limited":    ErrRateLimited,
	"expired":         ErrExpired,
	"observe_only":    ErrObserveOnly,
	"unavailable":     ErrUnavailable,
	"internal":        ErrInternal,
}

// Error is the agent's answer to a call that failed (or, with StatusCode 0, a call this client did not
// or could not send). errors.Is matches it to the sentinel of its Kind.
type Error struct {
	Op         string        // the operation: "start", "open", ...
	Kind       string        // the API's error kind: "invalid", "conflict", ... (a newer agent's kind matches no sentinel)
	StatusCode int           // the HTTP status; 0 when the agent did not answer
	Message    string        // the agent's message
	Field      string        // with invalid: the request field that was wrong
	Orphans    []string      // with not_found from Status, conflict from Start: what an earlier TrainJob left
	RetryAfter time.Duration // the agent's Retry-After (rate_limited)

	// On a MultiKueue manager, with not_found from Status and Start's refusals: what of the job (or of an earlier
	// TrainJob of its name) is left on each worker, by worker.
	Workers []WorkerRemains
	// On a MultiKueue manager, with not_found from Status: nil elsewhere; else whether every worker was read and
	// nothing of the job may run or start on any (CeasedReason says why).
	Ceased       *bool
	CeasedReason string

	sentinel error
	cause    error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "agent %s: %s: %s", e.Op, e.Kind, e.Message)
	if e.Field != "" {
		fmt.Fprintf(&b, " (field %s)", e.Field)
	}
	if len(e.Orphans) > 0 {
		fmt.Fprintf(&b, " (orphans: %s)", strings.Join(e.Orphans, ", "))
	}
	return b.String()
}

// Is reports whether target is the sentinel of the error's kind.
func (e *Error) Is(target error) bool { return e.sentinel != nil && target == e.sentinel }

// Unwrap returns what made the call fail on this side (a network error), if anything.
func (e *Error) Unwrap() error { return e.cause }

// CutOffError is a call that was sent but got no (whole) answer. It matches ErrOutcomeUnknown and its
// cause (io.ErrUnexpectedEOF, context.DeadlineExceeded, ...).
type CutOffError struct {
	Op  string
	Err error
}

func (e *CutOffError) Error() string {
	return fmt.Sprintf("agent %s: cut off after it was sent (%v): its outcome is unknown; re-read (Status, List) "+
		"before calling again", e.Op, e.Err)
}

func (e *CutOffError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.Err} }

// wireError is the API's error body.
type wireError struct {
	Error        string           `json:"error"`
	Message      string           `json:"message"`
	Field        *string          `json:"field"`
	Orphans      *[]string        `json:"orphans"`
	Workers      *[]WorkerRemains `json:"workers"`
	Ceased       *bool            `json:"ceased"`
	CeasedReason *string          `json:"ceasedReason"`
}

// noSuchEndpoint starts the agent's answer to a path it does not serve.
const noSuchEndpoint = "no such endpoint"

// answerError is the *Error for an HTTP answer with status >= 400. ours is false when the body is not the
// API's error body (a proxy's page, an agent too old to know the path).
func answerError(op string, status int, header http.Header, body []byte) (e *Error, ours bool) {
	e = &Error{Op: op, StatusCode: status, RetryAfter: retryAfter(header.Get("Retry-After"), time.Now())}
	var w wireError
	if json.Unmarshal(body, &w) == nil && w.Error != "" && w.Message != "" {
		e.Kind, e.Message, e.sentinel = w.Error, w.Message, kinds[w.Error]
		if w.Field != nil {
			e.Field = *w.Field
		}
		if w.Orphans != nil {
			e.Orphans = *w.Orphans
		}
		if w.Workers != nil {
			e.Workers = *w.Workers
		}
		e.Ceased = w.Ceased
		if w.CeasedReason != nil {
			e.CeasedReason = *w.CeasedReason
		}
		if status == http.StatusNotFound && strings.HasPrefix(w.Message, noSuchEndpoint) {
			e.sentinel = ErrUnsupported
		}
		return e, true
	}
	text := strings.TrimSpace(string(body))
	if len(text) > 500 {
		text = text[:500] + "…"
	}
	e.Message = fmt.Sprintf("HTTP %d without the API's error body: %q", status, text)
	switch {
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		// Not the agent's answer (it answers a missing TrainJob with its own body): a path this server does
		// not serve. Never ErrNotFound, which a supervisor would take for a TrainJob that is gone.
		e.Kind, e.sentinel = "unsupported", ErrUnsupported
	case status == http.StatusUnauthorized:
		e.Kind = "unauthenticated"
	case status == http.StatusForbidden:
		e.Kind = "forbidden"
	case status == http.StatusTooManyRequests:
		e.Kind = "rate_limited"
	case status >= 500:
		e.Kind = "unavailable"
	default:
		e.Kind = "invalid"
	}
	if e.sentinel == nil {
		e.sentinel = kinds[e.Kind]
	}
	return e, false
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(value string, now time.Time) time.Duration {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0
	}
	if s, err := strconv.Atoi(value); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(value); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// unreachable is the error of a call that was not sent: nothing happened on the agent.
func unreachable(op, server string, cause error) *Error {
	return &Error{Op: op, Kind: "unavailable", Message: fmt.Sprintf("cannot reach %s: %v (nothing was sent)", server, cause),
		sentinel: ErrUnavailable, cause: cause}
}

// statuses is the HTTP status of each kind (docs/api.md, Errors).
var statuses = map[string]int{"invalid": 400, "unauthenticated": 401, "forbidden": 403, "not_found": 404,
	"rejected": 409, "conflict": 409, "rate_limited": 429, "observe_only": 503, "unavailable": 503, "internal": 500}

// NewError is the *Error the agent answers for op with kind (one of the API's error kinds: "not_found",
// "conflict", ...) and message, matching the kind's sentinel: for fakes of Interface (agentfake) and tests.
func NewError(op, kind, message string) *Error {
	return &Error{Op: op, Kind: kind, StatusCode: statuses[kind], Message: message, sentinel: kinds[kind]}
}

// IsKind says whether err is an *Error of kind (a kind this client may have no sentinel for, from a newer
// agent, matches too).
func IsKind(err error, kind string) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == kind
}
