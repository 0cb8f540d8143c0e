package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// childEnv makes the test binary serve as a simulator process, so a
// benchmark can measure the simulator's CPU apart from its load generator.
const childEnv = "LMWARDEN_SIM_BENCH_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		runChildSimulator()
		return
	}
	os.Exit(m.Run())
}

func runChildSimulator() {
	p, _ := LookupProfile("a4000-qwen3-4b")
	s, err := Serve(context.Background(), ServerConfig{Replicas: 4, Listen: "127.0.0.1:0", Profile: p, Speed: 20, Model: "qwen3-4b"})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println(strings.Join(s.URLs(), " "))
	// serve until stdin closes, then exit so the parent reads our rusage
	buf := make([]byte, 1)
	os.Stdin.Read(buf)
	s.Close()
	os.Exit(0)
}

// BenchmarkRealMode4Replicas32StreamsSpeed20 measures the CPU (user+sys) of
// one simulator process serving 4 replicas at --speed 20 while 32 closed-loop
// sessions of the benchmark workload (docs/workload.md) stream from it (goal: under half a core).
func BenchmarkRealMode4Replicas32StreamsSpeed20(b *testing.B) {
	const wall = 15 * time.Second
	for b.Loop() {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || strings.HasPrefix(line, "ERR") {
			b.Fatalf("child: %q %v", line, err)
		}
		urls := strings.Fields(line)

		ctx, cancel := context.WithTimeout(context.Background(), wall)
		tr := &http.Transport{MaxIdleConnsPerHost: 64}
		client := &http.Client{Transport: tr}
		var requests, tokens atomic.Int64
		var wg sync.WaitGroup
		rng := rand.New(rand.NewPCG(7, 7))
		system := fillText(rng, 3500)
		for slot := range 32 {
			first := fmt.Sprintf("session %d ", slot) + fillText(rng, 7200+rng.IntN(300))
			follow := make([]string, 5)
			for k := range follow {
				follow[k] = fillText(rng, 385+rng.IntN(31))
			}
			pause := rand.New(rand.NewPCG(uint64(slot), 9))
			wg.Add(1)
			go func() {
				defer wg.Done()
				url := urls[slot%len(urls)] + "/v1/messages"
				for ctx.Err() == nil {
					msgs := []map[string]any{{"role": "user", "content": first}}
					for turn := 0; turn < 6 && ctx.Err() == nil; turn++ {
						body, _ := json.Marshal(map[string]any{"model": "qwen3-4b", "max_tokens": 256, "stream": true,
							"system": system, "messages": msgs})
						req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
						resp, err := client.Do(req)
						if err != nil {
							return
						}
						text, n := readAnthropicText(resp)
						tokens.Add(int64(n))
						requests.Add(1)
						if turn < 5 {
							msgs = append(msgs, map[string]any{"role": "assistant", "content": text},
								map[string]any{"role": "user", "content": follow[turn]})
						}
						time.Sleep(time.Duration(1+pause.IntN(4)) * time.Millisecond)
					}
				}
			}()
		}
		wg.Wait()
		cancel()
		tr.CloseIdleConnections()
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
		b.ReportMetric(float64(requests.Load()), "requests")
		b.ReportMetric(float64(tokens.Load())/wall.Seconds(), "tokens/s")
		b.Logf("simulator user+sys %v over %v wall: %.3f cores; %d requests, %d streamed tokens",
			cpu, wall, cpu.Seconds()/wall.Seconds(), requests.Load(), tokens.Load())
	}
}

// readAnthropicText reads an Anthropic SSE stream to its end and returns the
// text and the number of text deltas.
func readAnthropicText(resp *http.Response) (string, int) {
	defer resp.Body.Close()
	var text strings.Builder
	n := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte(`data: {"type":"content_block_delta"`)) {
			continue
		}
		var ev struct {
			Delta struct{ Text string } `json:"delta"`
		}
		if json.Unmarshal(line[len("data: "):], &ev) == nil {
			text.WriteString(ev.Delta.Text)
			n++
		}
	}
	return text.String(), n
}
