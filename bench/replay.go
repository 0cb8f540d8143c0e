package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

// ReplayConfig replays a request trace (docs/workload.md) instead of
// generating sessions: each step is a speed at which the trace's time
// passes (Step.ReplaySpeed: 2 plays an hour of trace in 30 minutes).
type ReplayConfig struct {
	Trace *Trace
	// From and Until select the slice of the trace's time that is played
	// (Until 0: to the end); the slice starts at From with empty caches.
	From, Until time.Duration
}

// ReplayResult is what a replay step adds to its Result.
type ReplayResult struct {
	Speed float64 `json:"speed"` // trace seconds a second
	// Requests and Conversations are the slice's; ConversationsDone those
	// whose every turn was answered.
	Requests          int `json:"requests"`
	Conversations     int `json:"conversations"`
	ConversationsDone int `json:"conversations_done"`
	// IdealHitRate is the slice's hit rate with an unlimited cache;
	// IdealCacheHitRate with one cache of CacheTokens, the replicas' total
	// (replay_ideal.go).
	IdealHitRate      Num `json:"ideal_hit_rate"`
	IdealCacheHitRate Num `json:"ideal_cache_hit_rate"`
	CacheTokens       int `json:"cache_tokens"`
	// LateTurns were sent after their time in the trace because the turn
	// before had not finished by then; LateMeanSeconds is their mean delay.
	LateTurns       int `json:"late_turns"`
	LateMeanSeconds Num `json:"late_mean_s"`
}

// replayPlan is a trace cut to its slice, with its conversations.
type replayPlan struct {
	cfg    ReplayConfig
	ideals map[int][2]float64 // by cache tokens (replayIdeal)
	conv   *traceConversations
	rows   []int   // the slice's rows, in arrival order
	convs  [][]int // the slice's conversations: their rows in the slice, in order
}

func newReplayPlan(cfg ReplayConfig) (*replayPlan, error) {
	t := cfg.Trace
	if t == nil || len(t.Rows) == 0 {
		return nil, fmt.Errorf("%w: no trace to replay", ErrBadConfig)
	}
	if cfg.From < 0 || (cfg.Until > 0 && cfg.Until <= cfg.From) {
		return nil, fmt.Errorf("%w: replay slice from %v until %v", ErrBadConfig, cfg.From, cfg.Until)
	}
	p := &replayPlan{cfg: cfg, conv: rebuildConversations(t)}
	index := map[int]int{} // trace conversation → slice conversation
	for i, row := range t.Rows {
		if row.At < cfg.From || (cfg.Until > 0 && row.At >= cfg.Until) {
			continue
		}
		p.rows = append(p.rows, i)
		c := p.conv.of[i]
		k, ok := index[c]
		if !ok {
			k = len(p.convs)
			index[c] = k
			p.convs = append(p.convs, nil)
		}
		p.convs[k] = append(p.convs[k], i)
	}
	if len(p.rows) == 0 {
		return nil, fmt.Errorf("%w: the trace has no request from %v until %v (it spans %v)", ErrBadConfig, cfg.From, cfg.Until, t.Span())
	}
	return p, nil
}

// span is the slice's length in trace time.
func (p *replayPlan) span() time.Duration {
	t := p.cfg.Trace
	return t.Rows[p.rows[len(p.rows)-1]].At - t.Rows[p.rows[0]].At
}

// replayOptions are a step's settings.
type replayOptions struct {
	speed    float64
	seed     uint64
	variant  uint64 // the window's text variant (SessionVariant's)
	noHeader bool   // send no session header
	tokens   bool   // render prompts as tokens (virtual runs), else as text
}

const replaySessionSalt = 0x5e55_7e91_0000_0007

// flows turns the slice into one flow a conversation, each starting at
// its first turn's time, compressed by the speed.
func (p *replayPlan) flows(o replayOptions, counts *replayCounts) flowPlan {
	text := newReplayText(o.seed, o.variant, p.cfg.Trace.Block)
	plan := flowPlan{untilDone: true, span: time.Duration(float64(p.span()) / o.speed)}
	for k, rows := range p.convs {
		c := &replayConv{plan: p, text: text, rows: rows, counts: counts, tokens: o.tokens}
		r := rand.New(rand.NewPCG(o.seed^replaySessionSalt^o.variant*0x9e3779b97f4a7c15, uint64(k)))
		c.id = uuid(r)
		if !o.noHeader {
			c.session = c.id
		}
		for _, i := range rows {
			c.at = append(c.at, time.Duration(float64(p.cfg.Trace.Rows[i].At-p.cfg.From)/o.speed))
		}
		plan.starts = append(plan.starts, flowStart{at: c.at[0], f: func() flow { return c }})
	}
	return plan
}

// replayCounts are what a step's conversations count together.
type replayCounts struct {
	late     int
	lateSum  time.Duration
	complete int
}

// replayConv is one conversation of the slice as a flow: its turns at the
// trace's times, each sent no earlier than the previous one's last token.
type replayConv struct {
	plan    *replayPlan
	text    *replayText
	rows    []int
	at      []time.Duration
	id      string // the task's name, and its session id unless none is sent
	session string
	counts  *replayCounts
	tokens  bool // render prompts as tokens, else as text
	next    int  // the turn to send next
	failed  bool
	ended   bool // Ended said so
}

func (c *replayConv) ID() string { return c.id }

// Ended names the conversation once its last turn is answered.
func (c *replayConv) Ended() []string {
	if c.Done() && !c.ended {
		c.ended = true
		return []string{c.id}
	}
	return nil
}
func (c *replayConv) Done() bool   { return c.next >= len(c.rows) }
func (c *replayConv) Failed() bool { return c.failed }

func (c *replayConv) Start(now time.Duration) []flowSend { return []flowSend{c.turn(now)} }

// Answered moves to the next turn; a failed turn does not stop the
// conversation (its next prompt comes from the trace, not the reply), but
// it is not counted complete.
func (c *replayConv) Answered(_ *flowSend, a flowAnswer, now time.Duration) []flowSend {
	if a.Err != nil {
		c.failed = true
	}
	c.next++
	if c.Done() {
		if !c.failed {
			c.counts.complete++
		}
		return nil
	}
	return []flowSend{c.turn(now)}
}

// turn is the next turn's request, at its time or, when the turn before
// took longer than the trace's gap, at once (now).
func (c *replayConv) turn(now time.Duration) flowSend {
	j := c.next
	row := c.plan.cfg.Trace.Rows[c.rows[j]]
	at := c.at[j]
	if at < now {
		c.counts.late++
		c.counts.lateSum += now - at
		at = now
	}
	s := flowSend{At: at, Conv: c.id, Session: c.session, MaxTokens: max(1, row.Output),
		First: j == 0, Fresh: j == 0, Turn: j,
		Bytes: int64(row.Input*sim.BytesPerToken + 160)}
	if c.tokens {
		s.Prompt = c.text.prompt(row.HashIDs, row.Input)
	} else {
		s.Messages = []sim.Message{{Role: "user", Content: c.text.content(row.HashIDs, row.Input)}}
	}
	return s
}

// result fills a step's replay numbers.
func (p *replayPlan) result(speed float64, counts *replayCounts, cacheTokens int) *ReplayResult {
	r := &ReplayResult{Speed: speed, Requests: len(p.rows), Conversations: len(p.convs),
		ConversationsDone: counts.complete, LateTurns: counts.late, CacheTokens: cacheTokens,
		LateMeanSeconds: Num(math.NaN())}
	u, c := p.ideal(cacheTokens)
	r.IdealHitRate, r.IdealCacheHitRate = Num(u), Num(c)
	if counts.late > 0 {
		r.LateMeanSeconds = Num((counts.lateSum / time.Duration(counts.late)).Seconds())
	}
	return r
}

// ideal is replayIdeal of the slice, computed once a cache size.
func (p *replayPlan) ideal(cacheTokens int) (unlimited, pooled float64) {
	if v, ok := p.ideals[cacheTokens]; ok {
		return v[0], v[1]
	}
	unlimited, pooled = replayIdeal(p.cfg.Trace, p.rows, cacheTokens)
	if p.ideals == nil {
		p.ideals = map[int][2]float64{}
	}
	p.ideals[cacheTokens] = [2]float64{unlimited, pooled}
	return unlimited, pooled
}
