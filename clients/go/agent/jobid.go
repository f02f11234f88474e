package agent

import (
	"crypto/rand"
	"fmt"
	"strings"
	"time"
)

// crockford is Crockford's base32 alphabet, as a ULID's canonical form spells it (upper case).
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewJobID is a new JobID: a ULID (48 bits of Unix milliseconds, then 80 random bits from crypto/rand) in its
// canonical form, 26 characters of Crockford base32 in upper case, as the API requires (contract/names.py:
// the TrainJob's name then carries it in lower case, dj-<jobid>-s<N>). One JobID names one job: every
// submission N of it reuses it, so make it once and record it before the first Start.
func NewJobID() JobID { return newJobID(time.Now(), rand.Read) }

func newJobID(now time.Time, random func([]byte) (int, error)) JobID {
	var b [16]byte
	ms := uint64(now.UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	if _, err := random(b[6:]); err != nil {
		panic(fmt.Sprintf("agent.NewJobID: no randomness: %v", err)) // crypto/rand.Read does not fail
	}
	var hi, lo uint64
	for i := range 8 {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[i+8])
	}
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// ValidJobID says whether id is a JobID the agent accepts: a ULID in canonical upper case. The first
// character is at most 7 (a ULID is 128 bits).
func ValidJobID(id string) error {
	if len(id) != 26 {
		return fmt.Errorf("JobID %q: a ULID has 26 characters, not %d", id, len(id))
	}
	for i, r := range id {
		if !strings.ContainsRune(crockford, r) {
			if strings.ContainsRune(crockford, r-'a'+'A') && r >= 'a' && r <= 'z' {
				return fmt.Errorf("JobID %q: not in canonical upper case; send %q", id, strings.ToUpper(id))
			}
			return fmt.Errorf("JobID %q: %q at %d is not Crockford base32", id, r, i)
		}
	}
	if id[0] > '7' {
		return fmt.Errorf("JobID %q: larger than a ULID's 128 bits", id)
	}
	return nil
}
