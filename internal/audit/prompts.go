package audit

import (
	"strings"
)

// The prompt material. It is plain TinyStories-like English, so that any
// model continues it with ordinary text, and short enough that every probe
// and canary fits a 256-token context on a 512-piece vocabulary with
// MaxTokens to spare (TestPromptsFitSmallContext).

// sharedStory is the long prefix that every tenant's p0 probe and c1
// canary share. A prefix cache shared across tenants, or one that matches
// too loosely, would serve one tenant's KV to another on it.
const sharedStory = "Once upon a time, in a small town by the sea, there lived a kind old man " +
	"who had a red boat. Every morning he went out to catch fish, and every evening " +
	"he came home and told stories to the children of the town."

// openings are the story starts that probes and canaries vary over.
var openings = []string{
	"One day, a little girl named Lily found a shiny key in the park.",
	"Tom and his dog went to the big hill to fly a kite.",
	"The little bird was sad because it could not find its mom.",
	"Sara had a box of crayons and she wanted to draw a sun.",
	"Ben saw a big truck on the road and he ran to his dad.",
	"A small cat lived in a tree near a green pond.",
}

// storyOpening is the p1 probe: the same for every tenant.
const storyOpening = "Once upon a time, there was a"

// fillerWords make up the over-limit text prompts: each is at least one
// token in any vocabulary, so n words are at least n tokens.
var fillerWords = []string{"red", "blue", "green", "cat", "dog", "sun", "tree", "ball", "box", "hat", "cup", "fish"}

// probePrompt returns the text of probe name ("p0", "p1", "p2") for a
// tenant. variant picks the tenant's opening.
func probePrompt(name, nonce string, variant int) string {
	switch name {
	case "p0":
		// The nonce comes first, so that nothing an earlier audit sent
		// can share more than a token or two of this prefix.
		s := sharedStory + " " + openings[variant%len(openings)]
		if nonce != "" {
			s = nonce + ". " + s
		}
		return s
	case "p1":
		return storyOpening
	default:
		return openings[variant%len(openings)]
	}
}

// canaryPrompt returns the text of canary name ("c0".."c3") carrying word
// (the marker's canary-<tenant>-<hex> form): at the start, in the middle
// of the shared story, at the end, and twice in a longer chat message.
func canaryPrompt(name, word string, variant int) string {
	open := openings[variant%len(openings)]
	switch name {
	case "c0":
		return word + " " + open
	case "c1":
		half := strings.Index(sharedStory, " Every morning")
		return sharedStory[:half] + " " + word + sharedStory[half:]
	case "c2":
		return open + " " + word
	default:
		return "Remember the secret word " + word + ". " + open + " Then she said the secret word, " + word + "."
	}
}

// overLimitText is a chat prompt of at least n tokens that starts with
// word: word and n filler words.
func overLimitText(word string, n int) string {
	var b strings.Builder
	b.Grow(len(word) + 6*n)
	b.WriteString(word)
	for i := range n {
		b.WriteByte(' ')
		b.WriteString(fillerWords[i%len(fillerWords)])
	}
	return b.String()
}

// overLimitIDs is a token-array prompt of n ids. Every id is below 259,
// which every Llama-family vocabulary has (the byte tokens end at 258), so
// a server cannot refuse it for an unknown id instead of for its length.
func overLimitIDs(n int, salt uint64) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = 3 + int((uint64(i)*31+salt)%253)
	}
	if n > 0 {
		ids[0] = 1 // BOS in Llama vocabularies; an ordinary id elsewhere
	}
	return ids
}
