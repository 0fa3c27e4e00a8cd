package loadgen

import (
	"math/rand/v2"
	"strings"
)

// Story-like vocabulary: short, common English words, so that a prompt of
// n words is near n tokens under the usual tokenizers and reads like the
// text small story models were trained on.
var (
	names = []string{"Lily", "Tom", "Ben", "Mia", "Sam", "Anna", "Max", "Sue", "Tim", "Lucy",
		"Jack", "Emma", "Leo", "Zoe", "Finn", "Ruby", "Nora", "Owen", "Ivy", "Hugo"}
	adjectives = []string{"little", "big", "happy", "sad", "red", "blue", "shiny", "old", "kind",
		"brave", "tiny", "funny", "quiet", "loud", "soft", "warm", "cold", "green", "sleepy", "busy"}
	nouns = []string{"dog", "cat", "ball", "tree", "park", "box", "bird", "car", "cake", "boat",
		"house", "garden", "flower", "river", "hat", "kite", "toy", "book", "apple", "moon",
		"bear", "fish", "truck", "sun", "cup", "door", "hill", "frog", "star", "bench"}
	verbs = []string{"saw", "found", "liked", "wanted", "played with", "looked at", "took", "made",
		"gave away", "lost", "shared", "painted", "hugged", "fixed", "carried", "hid"}
	places = []string{"in the park", "by the river", "at home", "under the tree", "near the sea",
		"in the garden", "on the hill", "at school", "in the forest", "by the lake"}
	openers = []string{"One day,", "Once upon a time,", "In the morning,", "Later,", "Then",
		"After lunch,", "That night,", "Suddenly,", "Every day,", "At last,"}
	feelings = []string{"was happy.", "smiled.", "felt proud.", "laughed.", "was surprised.",
		"said thank you.", "wanted to play.", "felt sleepy.", "was very glad.", "ran home."}
)

// Prompt returns a story-like prompt of roughly words words, different
// for each (seed, index) and the same every time for the same pair, so a
// run can be repeated exactly while no two of its requests share a
// prefix that a prefix cache could reuse.
func Prompt(seed, index uint64, words int) string {
	rng := rand.New(rand.NewPCG(seed, index))
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	var b strings.Builder
	n := 0
	for n < max(words, 1) {
		who, what := pick(names), pick(adjectives)+" "+pick(nouns)
		var s string
		switch rng.IntN(4) {
		case 0:
			s = pick(openers) + " " + who + " " + pick(verbs) + " " + article(what) + " " + what + " " + pick(places) + "."
		case 1:
			s = who + " had " + article(what) + " " + what + ". " + who + " " + pick(feelings)
		case 2:
			s = "The " + what + " was " + pick(places) + ", and " + who + " " + pick(verbs) + " it."
		default:
			s = who + " and " + pick(names) + " " + pick(verbs) + " the " + what + ". They " + pick(feelings)
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s)
		n += strings.Count(s, " ") + 1
	}
	return b.String()
}

// wordsForTokens converts an approximate prompt length in tokens into a
// word count, using the common rule of thumb of three words per four
// tokens for English text.
func wordsForTokens(tokens int) int { return max(1, tokens*3/4) }

func article(w string) string {
	if strings.IndexByte("aeiou", w[0]) >= 0 {
		return "an"
	}
	return "a"
}
