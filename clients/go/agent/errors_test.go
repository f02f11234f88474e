package agent

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var sentinels = []error{ErrInvalid, ErrUnauthenticated, ErrForbidden, ErrNotFound, ErrRejected, ErrConflict,
	ErrRateLimited, ErrExpired, ErrObserveOnly, ErrUnavailable, ErrInternal, ErrUnsupported, ErrOutcomeUnknown}

// docsAPI is the repository's docs/api.md, seen from this package in the repository.
var docsAPI = filepath.Join("..", "..", "..", "docs", "api.md")

// docsErrorTable is each error kind of docs/api.md's Errors table, with its HTTP status. Outside the
// repository (a copy of the module, as a consumer builds it) there is no docs/api.md: the check is skipped
// there, and tests/goclient/test_go_module.py runs it in the repository and fails if it skipped.
func docsErrorTable(t *testing.T) map[string]int {
	raw, err := os.ReadFile(docsAPI)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("SKIP-DOCS: %s is not here (the module outside its repository): the docs' Errors table is "+
			"checked in the repository (tests/goclient)", docsAPI)
	}
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (\\d{3}) \\|").FindAllStringSubmatch(string(raw), -1)
	table := map[string]int{}
	for _, row := range rows {
		var status int
		for _, c := range row[2] {
			status = status*10 + int(c-'0')
		}
		table[row[1]] = status
	}
	if len(table) < 10 {
		t.Fatalf("docs/api.md's Errors table was not found: %v", table)
	}
	return table
}

func TestEveryErrorCodeOfTheDocsMatchesItsSentinelOnly(t *testing.T) {
	table := docsErrorTable(t)
	for kind, status := range table {
		t.Run(kind, func(t *testing.T) {
			want, ok := kinds[kind]
			if !ok {
				t.Fatalf("docs/api.md's error %q has no sentinel", kind)
			}
			f := newFake(t)
			body := map[string]any{"error": kind, "message": "the agent says " + kind}
			if kind == "invalid" {
				body["field"] = "n"
			}
			if kind == "not_found" {
				body["orphans"] = []string{"team-a/jobset/" + ref.Name}
				// On a MultiKueue manager: what is left on each worker, and Ceased across them.
				body["workers"] = []map[string]any{{"cluster": "worker-1", "read": true, "fenced": false,
					"orphans": []string{"team-a/trainjob/" + ref.Name}, "mayStillRun": true,
					"reason": "MultiKueue's copy of the TrainJob is there and has not finished: it may start there"}}
				body["ceased"] = false
				body["ceasedReason"] = "the TrainJob is gone, but something of it may still run on a worker: worker-1"
			}
			// expired is Watch's alone (the document says which operation answers which code).
			path, op := "/v1/status", "status"
			if kind == "expired" {
				path, op = "/v1/watch", "watch"
			}
			f.handle(path, func(w http.ResponseWriter, r *http.Request) {
				if kind == "rate_limited" {
					w.Header().Set("Retry-After", "7")
				}
				answer(w, status, body)
			})
			c, _ := client(t, f, clientOpts{opts: []Option{WithRetry(RetryPolicy{})}})
			var err error
			if op == "watch" {
				_, err = c.Watch(context.Background(), WatchRequest{Namespace: "team-a", Version: "1.2.3"})
			} else {
				_, err = c.Status(context.Background(), ref)
			}
			for _, s := range sentinels {
				if got := errors.Is(err, s); got != (s == want) {
					t.Errorf("errors.Is(%v, %v) = %v", err, s, got)
				}
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%T is not an *Error", err)
			}
			if e.Kind != kind || e.StatusCode != status || e.Message != "the agent says "+kind || e.Op != op {
				t.Errorf("%+v", e)
			}
			if kind == "invalid" && e.Field != "n" {
				t.Errorf("field %q", e.Field)
			}
			if kind == "not_found" && !slices.Equal(e.Orphans, []string{"team-a/jobset/" + ref.Name}) {
				t.Errorf("orphans %q", e.Orphans)
			}
			if kind == "not_found" {
				if len(e.Workers) != 1 || e.Workers[0].Cluster != "worker-1" || !e.Workers[0].Read ||
					!e.Workers[0].MayStillRun || !slices.Equal(e.Workers[0].Orphans, []string{"team-a/trainjob/" + ref.Name}) {
					t.Errorf("workers %+v", e.Workers)
				}
				if e.Ceased == nil || *e.Ceased || !strings.HasPrefix(e.CeasedReason, "the TrainJob is gone, but") {
					t.Errorf("ceased %v %q", e.Ceased, e.CeasedReason)
				}
			} else if e.Workers != nil || e.Ceased != nil {
				t.Errorf("workers %+v, ceased %v without them in the body", e.Workers, e.Ceased)
			}
			if kind == "rate_limited" && e.RetryAfter != 7*time.Second {
				t.Errorf("retry after %s", e.RetryAfter)
			}
		})
	}
	for kind := range kinds {
		if _, ok := table[kind]; !ok {
			t.Errorf("the sentinel of %q has no row in docs/api.md's Errors table", kind)
		}
	}
}

func TestAMissingEndpointIsUnsupportedNeverNotFound(t *testing.T) {
	f := newFake(t) // serves no route: every call is "no such endpoint"
	c, _ := client(t, f, clientOpts{})
	_, err := c.Status(context.Background(), ref)
	if !errors.Is(err, ErrUnsupported) || errors.Is(err, ErrNotFound) {
		t.Fatalf("%v: want ErrUnsupported, not ErrNotFound", err)
	}
}

func TestAnswersThatAreNotTheAPIsMapByTheirStatus(t *testing.T) {
	cases := []struct {
		status int
		want   error
	}{{502, ErrUnavailable}, {404, ErrUnsupported}, {401, ErrUnauthenticated}, {403, ErrForbidden}, {429, ErrRateLimited}, {400, ErrInvalid}}
	for _, tc := range cases {
		f := newFake(t)
		f.handle("/v1/stop", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte("<html>a proxy's page</html>"))
		})
		c, _ := client(t, f, clientOpts{unchecked: true, opts: []Option{WithRetry(RetryPolicy{})}})
		_, err := c.Stop(context.Background(), ref)
		if !errors.Is(err, tc.want) {
			t.Errorf("%d: %v, want %v", tc.status, err, tc.want)
		}
		if tc.status == 404 && errors.Is(err, ErrNotFound) {
			t.Errorf("a 404 that is not the agent's says nothing of the TrainJob: %v", err)
		}
	}
}

func TestAnAnswerTheClientCannotReadIsInternal(t *testing.T) {
	f := newFake(t)
	f.handle("/v1/stop", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"outcome": 3}`))
	})
	c, _ := client(t, f, clientOpts{unchecked: true})
	if _, err := c.Stop(context.Background(), ref); !errors.Is(err, ErrInternal) {
		t.Fatalf("%v", err)
	}
}

func TestRetryAfterIsSecondsOrADate(t *testing.T) {
	now := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	for value, want := range map[string]time.Duration{
		"3": 3 * time.Second, "": 0, "-1": 0, "soon": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
	} {
		if got := retryAfter(value, now); got != want {
			t.Errorf("Retry-After %q: %s, want %s", value, got, want)
		}
	}
}
