package picker

import (
	"strings"
	"sync"
)

// answerCache keeps the parts of pick answers by endpoint list: a list
// repeats for every request of a conversation and changes only with the
// hosts' order, so its header mutation and metadata (maps of maps, the
// costliest part of an answer to build) are built once. Bounded: when it
// holds maxAnswers lists it starts again empty.
type answerCache struct {
	ns string
	mu sync.RWMutex
	m  map[string]*pickParts
}

const maxAnswers = 4096

func newAnswerCache(ns string) *answerCache {
	return &answerCache{ns: ns, m: map[string]*pickParts{}}
}

func (c *answerCache) get(endpoints []string) *pickParts {
	key := endpoints[0]
	if len(endpoints) > 1 {
		key = strings.Join(endpoints, ",")
	}
	c.mu.RLock()
	p := c.m[key]
	c.mu.RUnlock()
	if p != nil {
		return p
	}
	p = newPickParts(endpoints, c.ns)
	c.mu.Lock()
	if len(c.m) >= maxAnswers {
		c.m = map[string]*pickParts{}
	}
	c.m[key] = p
	c.mu.Unlock()
	return p
}
