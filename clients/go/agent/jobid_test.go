package agent

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNewJobIDIsACanonicalULID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewJobID()
		if err := ValidJobID(id); err != nil || strings.ContainsAny(id, "ILOU") || seen[id] {
			t.Fatalf("%s: %v", id, err)
		}
		seen[id] = true
	}
}

func TestNewJobIDEncodesItsTimeFirst(t *testing.T) {
	zeros := func(b []byte) (int, error) { clear(b); return len(b), nil }
	// The ULID spec's example time, 2016-07-30T23:54:10.259Z, is 01ARYZ6S41 in its first ten characters.
	at := time.UnixMilli(1469918176385)
	if got := newJobID(at, zeros); got != "01ARYZ6S41"+strings.Repeat("0", 16) {
		t.Fatal(got)
	}
	ones := func(b []byte) (int, error) {
		for i := range b {
			b[i] = 0xff
		}
		return len(b), nil
	}
	if got := newJobID(at, ones); got != "01ARYZ6S41"+strings.Repeat("Z", 16) {
		t.Fatal(got)
	}
	if a, b := newJobID(at, zeros), newJobID(at.Add(time.Millisecond), zeros); a >= b {
		t.Fatalf("%s then %s: not sorted by time", a, b)
	}
}

func TestValidJobIDSaysWhy(t *testing.T) {
	for id, says := range map[string]string{
		"01jdq7z9v3k8m2n4p6r8t0w2y4": "upper case",
		"01JDQ7Z9V3K8M2N4P6R8T0W2Y":  "26 characters",
		"01JDQ7Z9V3K8M2N4P6R8T0W2YU": "not Crockford",
		"81JDQ7Z9V3K8M2N4P6R8T0W2Y4": "128 bits",
	} {
		if err := ValidJobID(id); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want %q", id, err, says)
		}
	}
	if err := ValidJobID("01JDQ7Z9V3K8M2N4P6R8T0W2Y4"); err != nil {
		t.Fatal(errors.Unwrap(err), err)
	}
}
