package sim

// outputWords are the pieces the simulated model "generates": each is exactly
// BytesPerToken bytes, so an output of n pieces is exactly n tokens and
// tokenizes back to the same tokens when a client resends it.
var outputWords = [...]string{
	"the ", "and ", "for ", "run ", "fix ", "add ", "set ", "get ",
	"use ", "map ", "key ", "log ", "end ", "new ", "old ", "api ",
	"bug ", "dir ", "env ", "err ", "var ", "arg ", "ref ", "row ",
	"sum ", "max ", "min ", "try ", "let ", "out ", "now ", "all ",
}

// outputSeed derives a request's output from its prompt, so the same prompt
// gives the same text (greedy decoding) and different prompts differ.
func outputSeed(prompt []uint32) uint64 {
	h := uint64(0x9e3779b97f4a7c15) ^ uint64(len(prompt))
	// The tail of the prompt is what differs between turns and sessions;
	// hashing all of it would cost a pass over 12k tokens per request.
	start := max(0, len(prompt)-64)
	for _, t := range prompt[start:] {
		h = mix64(h ^ uint64(t))
	}
	for i := 0; i < len(prompt) && i < 64; i++ {
		h = mix64(h + uint64(prompt[i]))
	}
	return h
}

// pieceToken is the token a piece tokenizes to, precomputed.
var pieceTokens = func() [len(outputWords)]uint32 {
	var t [len(outputWords)]uint32
	for i, w := range outputWords {
		t[i] = Tokenize(w)[0]
	}
	return t
}()

func outputToken(seed uint64, i int) (uint32, string) {
	k := mix64(seed+uint64(i)*0x9e3779b97f4a7c15) % uint64(len(outputWords))
	return pieceTokens[k], outputWords[k]
}
