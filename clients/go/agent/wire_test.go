package agent

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phpboyscout/dispatch-k8s/clients/go/internal/wire"
)

// carriers is, for each schema of the document (a generated type), the types of this package that carry
// its fields: every field of the wire type has one of the same JSON name in them, and nothing more.
var carriers = map[reflect.Type][]reflect.Type{
	typeOf[wire.Capabilities]():       {typeOf[Capabilities]()},
	typeOf[wire.CredentialSpec]():     {typeOf[CredentialSpec]()},
	typeOf[wire.ErrorResponse]():      {typeOf[wireError]()},
	typeOf[wire.ExecutionModel]():     {typeOf[Execution]()},
	typeOf[wire.HoldModel]():          {typeOf[HoldRecord]()},
	typeOf[wire.HoldRequest]():        {typeOf[ObjectRef](), typeOf[HoldRequest]()},
	typeOf[wire.KueueSpec]():          {typeOf[KueueSpec]()},
	typeOf[wire.ListItem]():           {typeOf[ListItem]()},
	typeOf[wire.ListRequest]():        {typeOf[ListRequest]()},
	typeOf[wire.ListResponse]():       {typeOf[ListResponse]()},
	typeOf[wire.ObjectRef]():          {typeOf[ObjectRef]()},
	typeOf[wire.OpenResponse]():       {typeOf[OpenResponse]()},
	typeOf[wire.OutcomeResponse]():    {typeOf[OutcomeResponse]()},
	typeOf[wire.OutputRequest]():      {typeOf[ObjectRef](), typeOf[OutputOptions]()},
	typeOf[wire.PodStatusModel]():     {typeOf[PodStatus]()},
	typeOf[wire.PreflightRequest]():   {typeOf[PreflightRequest]()},
	typeOf[wire.PublishSpec]():        {typeOf[PublishSpec]()},
	typeOf[wire.RuntimeRef]():         {typeOf[RuntimeRef]()},
	typeOf[wire.StartRequest]():       {typeOf[StartRequest]()},
	typeOf[wire.StartResponse]():      {typeOf[StartResponse]()},
	typeOf[wire.StatusResponse]():     {typeOf[Status]()},
	typeOf[wire.WatchRequest]():       {typeOf[watchBody]()},
	typeOf[wire.WatchResponse]():      {typeOf[WatchResponse]()},
	typeOf[wire.WorkerRemainsModel](): {typeOf[WorkerRemains]()},
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

func jsonNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func TestEverySchemaHasItsType(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(document(t), &doc); err != nil {
		t.Fatal(err)
	}
	byName := map[string]bool{}
	for w := range carriers {
		byName[w.Name()] = true
	}
	for name := range doc.Components.Schemas {
		if !byName[name] {
			t.Errorf("the schema %s has no carrier in package agent (wire_test.go's carriers)", name)
		}
	}
}

func TestEveryWireFieldIsCarried(t *testing.T) {
	for w, ours := range carriers {
		var have []string
		for _, o := range ours {
			have = append(have, jsonNames(o)...)
		}
		slices.Sort(have)
		if want := jsonNames(w); !slices.Equal(have, want) {
			t.Errorf("wire.%s has the fields %q; package agent's %v carry %q", w.Name(), want, ours, have)
		}
	}
}

const stamp = "2026-12-01T06:00:00Z"

// fill sets every field of v (a pointer) to a value that is not zero, recursively.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		if v.Type() == typeOf[time.Time]() {
			at, _ := time.Parse(time.RFC3339, stamp)
			v.Set(reflect.ValueOf(at))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.String:
		v.SetString(stamp) // a timestamp reads as one; any other string is a string
	case reflect.Int:
		v.SetInt(7)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		key, elem := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(key)
		fill(elem)
		v.SetMapIndex(key, elem)
	}
}

func asJSON(t *testing.T, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Every field of every answer reaches the caller: a wire answer, filled, read into this package's type and
// written again, is the same JSON.
func TestEveryAnswerFieldReachesTheCaller(t *testing.T) {
	answers := map[reflect.Type]reflect.Type{}
	for w, ours := range carriers {
		if len(ours) == 1 && !strings.HasSuffix(w.Name(), "Request") {
			answers[w] = ours[0]
		}
	}
	for w, ours := range answers {
		in := reflect.New(w)
		fill(in.Elem())
		raw, _ := json.Marshal(in.Interface())
		out := reflect.New(ours)
		if err := json.Unmarshal(raw, out.Interface()); err != nil {
			t.Errorf("wire.%s into %s: %v", w.Name(), ours.Name(), err)
			continue
		}
		if got, want := asJSON(t, out.Interface()), asJSON(t, in.Interface()); !reflect.DeepEqual(got, want) {
			t.Errorf("wire.%s through %s:\n got %v\nwant %v", w.Name(), ours.Name(), got, want)
		}
	}
}

// Every field of every request reaches the agent: this package's request, filled, converted as the client
// converts it, is the same JSON.
func TestEveryRequestFieldReachesTheAgent(t *testing.T) {
	check := func(name string, ours any, converted any) {
		if got, want := asJSON(t, converted), asJSON(t, ours); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", name, got, want)
		}
	}
	var start StartRequest
	fill(reflect.ValueOf(&start).Elem())
	ws, err := toWire[wire.StartRequest](start)
	if err != nil {
		t.Fatal(err)
	}
	check("StartRequest", start, ws)
	var pre PreflightRequest
	fill(reflect.ValueOf(&pre).Elem())
	wp, _ := toWire[wire.PreflightRequest](pre)
	check("PreflightRequest", pre, wp)
	var list ListRequest
	fill(reflect.ValueOf(&list).Elem())
	wl, _ := toWire[wire.ListRequest](list)
	check("ListRequest", list, wl)
	var r ObjectRef
	fill(reflect.ValueOf(&r).Elem())
	check("ObjectRef", r, wireRef(r))
	var hold HoldRequest
	fill(reflect.ValueOf(&hold).Elem())
	merged := map[string]any{"namespace": r.Namespace, "name": r.Name, "uid": r.UID, "who": hold.Who, "reason": hold.Reason, "until": stamp}
	check("HoldRequest", merged, holdBody(r, hold))
	var o OutputOptions
	fill(reflect.ValueOf(&o).Elem())
	check("OutputRequest", map[string]any{"namespace": r.Namespace, "name": r.Name, "uid": r.UID, "follow": true, "tailLines": 7}, outputBody(r, o))
}
