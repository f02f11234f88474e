package agent_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/phpboyscout/dispatch-k8s/clients/go/agent"
	"github.com/phpboyscout/dispatch-k8s/clients/go/agent/agentfake"
)

func ExampleNew() {
	c, err := agent.New("https://dispatch-k8s.dispatch-system.svc:8443",
		agent.WithTokenFile("/var/run/secrets/dispatch/token"), // read at every call: a projected token rotates
		agent.WithAudience("dispatch-agent"),                   // when the agent sets tokenAudiences
		agent.WithRateLimit(5, 10),                             // at most 5 calls a second, 10 at once
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	fmt.Println("ready")
	// Output: ready
}

func ExampleNewJobID() {
	id := agent.NewJobID() // once per job, recorded before the first Start; every N reuses it
	fmt.Println(len(id), agent.ValidJobID(id) == nil)
	// Output: 26 true
}

// A supervisor's run of one job, written against agent.Interface: here the in-memory agent of agentfake, in
// production a *agent.Client.
func ExampleInterface() {
	ctx := context.Background()
	var api agent.Interface = agentfake.New()
	started, err := api.Start(ctx, agent.StartRequest{
		JobID: agent.NewJobID(), N: 1, Namespace: "team-a", Runtime: agent.RuntimeRef{Name: "dispatch-torch"},
		Image: "registry.example/train:1", Command: []string{"python", "train.py"},
		Kueue: &agent.KueueSpec{LocalQueue: "team-a"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ref := started.Ref() // record it before anything else
	st, _ := api.Status(ctx, ref)
	fmt.Println(st.Phase, st.Gate)
	opened, _ := api.Open(ctx, ref)
	fmt.Println(opened.Outcome)
	held, _ := api.Hold(ctx, ref, agent.HoldRequest{Who: "ops", Reason: "maintenance", Until: time.Now().Add(time.Hour)})
	fmt.Println(held.Outcome)
	released, _ := api.Release(ctx, ref)
	fmt.Println(released.Outcome)
	stopped, _ := api.Stop(ctx, ref)
	fmt.Println(stopped.Outcome)
	_, err = api.Status(ctx, ref)
	fmt.Println(errors.Is(err, agent.ErrNotFound))
	// Output:
	// Gated closed
	// gate removed
	// held: Workload deactivated
	// released: Workload reactivated
	// stopping
	// true
}

// After a cut-off Start (agent.ErrOutcomeUnknown) the TrainJob may or may not exist: List by JobID tells.
func ExampleErrOutcomeUnknown() {
	ctx := context.Background()
	fake := agentfake.New()
	fake.Inject("start", agentfake.Fault{Err: agentfake.CutOff("start"), Applied: true}) // it happened, unanswered
	var api agent.Interface = fake
	req := agent.StartRequest{JobID: agent.NewJobID(), N: 1, Namespace: "team-a",
		Runtime: agent.RuntimeRef{Name: "dispatch-torch"}, Image: "registry.example/train:1", Command: []string{"train"}}
	_, err := api.Start(ctx, req)
	if errors.Is(err, agent.ErrOutcomeUnknown) {
		items, err := api.ListAll(ctx, agent.ListRequest{Namespace: req.Namespace, JobID: req.JobID})
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, item := range items {
			fmt.Println(item.Phase, *item.N, item.Ref() == item.Ref())
		}
	}
	// Output: Gated 1 true
}

func ExampleError() {
	err := fmt.Errorf("opening: %w", agent.NewError("open", "conflict", "waiting for 1 pod(s) of the previous execution"))
	var e *agent.Error
	fmt.Println(errors.Is(err, agent.ErrConflict), errors.Is(err, agent.ErrNotFound), errors.As(err, &e) && e.Op == "open")
	// Output: true false true
}

func ExampleWithCallRetry() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var api agent.Interface = agentfake.New()
	// This one call is not repeated by the client, whatever its policy (WithRetry).
	_, err := api.Capabilities(ctx, agent.WithCallRetry(agent.RetryPolicy{}), agent.WithCallTimeout(5*time.Second))
	fmt.Println(err)
	// Output: <nil>
}
