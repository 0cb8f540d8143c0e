package adminapi

import (
	"fmt"
	"strconv"
	"strings"
)

// SessionCursor is where a page of GET /api/v1/sessions ended, the
// ?after= of the next: pages go model by model (in the configuration's
// order), each model's sessions newest first (by last seen, then hash).
// Its text is "MODEL.LASTSEEN.HASH": the model's index, the last
// session's last seen in Unix nanoseconds, its hash in hex.
type SessionCursor struct {
	Model    int
	LastSeen int64
	Hash     uint64
}

// String is the cursor's text.
func (c SessionCursor) String() string {
	return fmt.Sprintf("%d.%d.%016x", c.Model, c.LastSeen, c.Hash)
}

// ParseSessionCursor reads a cursor's text.
func ParseSessionCursor(s string) (SessionCursor, error) {
	f := strings.Split(s, ".")
	if len(f) == 3 {
		m, err1 := strconv.Atoi(f[0])
		seen, err2 := strconv.ParseInt(f[1], 10, 64)
		h, err3 := strconv.ParseUint(f[2], 16, 64)
		if err1 == nil && err2 == nil && err3 == nil && m >= 0 {
			return SessionCursor{Model: m, LastSeen: seen, Hash: h}, nil
		}
	}
	return SessionCursor{}, fmt.Errorf("after %q: not a cursor (the next of a previous page)", s)
}
