package sim

// The simulator's tokenizer is deliberately trivial: every 4 bytes of text is
// one token (the last token of a text may be shorter). It is deterministic,
// about as dense as a real BPE on English, and has the property routing
// depends on: a text's tokens never depend on what surrounds it, because each
// message's content is tokenized on its own between role-marker tokens, as a
// chat template renders it.

// Message is one chat message with its content already flattened to text
// (see FlattenContent for how blocks become text).
type Message struct {
	Role    string
	Content string
}

// BytesPerToken is how many bytes of text make one token.
const BytesPerToken = 4

// Marker tokens sit below firstTextToken, so no text can produce them.
const (
	tokSystem uint32 = iota + 1
	tokUser
	tokAssistant
	tokTool
	tokOther
	tokEnd
	firstTextToken uint32 = 256
)

func roleToken(role string) uint32 {
	switch role {
	case "system", "developer":
		return tokSystem
	case "user":
		return tokUser
	case "assistant":
		return tokAssistant
	case "tool":
		return tokTool
	default:
		return tokOther
	}
}

// RenderPrompt renders a conversation as a chat template does (the system
// text, then each message between its role marker and an end marker) and ends
// with the assistant generation marker. For a prompt P and the generated text
// O, the next turn's prompt (the same history + assistant O + a new user
// message) starts with P followed by Tokenize(O).
func RenderPrompt(system string, msgs []Message) []uint32 {
	n := 1
	if system != "" {
		n += 2 + tokenCount(system)
	}
	for _, m := range msgs {
		n += 2 + tokenCount(m.Content)
	}
	out := make([]uint32, 0, n)
	if system != "" {
		out = append(out, tokSystem)
		out = appendTokens(out, system)
		out = append(out, tokEnd)
	}
	for _, m := range msgs {
		out = append(out, roleToken(m.Role))
		out = appendTokens(out, m.Content)
		out = append(out, tokEnd)
	}
	return append(out, tokAssistant)
}

// Tokenize returns the tokens of one text.
func Tokenize(text string) []uint32 {
	return appendTokens(make([]uint32, 0, tokenCount(text)), text)
}

// TokenCount is len(Tokenize(text)) without allocating.
func TokenCount(text string) int { return tokenCount(text) }

func tokenCount(text string) int { return (len(text) + BytesPerToken - 1) / BytesPerToken }

func appendTokens(out []uint32, text string) []uint32 {
	for i := 0; i < len(text); i += BytesPerToken {
		var v uint64
		end := min(i+BytesPerToken, len(text))
		for j := i; j < end; j++ {
			v = v<<8 | uint64(text[j])
		}
		v |= uint64(end-i) << 32 // "ab" and "\x00\x00ab" differ
		out = append(out, textToken(v))
	}
	return out
}

// textToken maps a chunk to a token id at or above firstTextToken.
func textToken(v uint64) uint32 {
	v = mix64(v)
	t := uint32(v)
	if t < firstTextToken {
		t += firstTextToken
	}
	return t
}

// mix64 is splitmix64's finalizer: cheap and well spread.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
