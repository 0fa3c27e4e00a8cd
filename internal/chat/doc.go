// Package chat renders a conversation (chat messages) into the prompt text a
// model was trained on.
//
// It owns chat templates: the Jinja template a GGUF file carries in
// tokenizer.chat_template, run by a Jinja engine (github.com/ardanlabs/jinja)
// with the variables Hugging Face templates expect (messages,
// add_generation_prompt, bos_token, eos_token, raise_exception), and the
// built-in template for models that have none (Builtin).
//
// It also owns the boundary between trusted template text and untrusted
// message content: Render returns segments that say which text came from a
// message, so that the caller can tokenize message content without special
// tokens. A user who types "<|im_end|>" gets those characters, not the
// control token that would let them forge a turn.
//
// It also bounds what a template may cost: the template comes from the
// model file, and the engine has no limits of its own, so New rewrites it
// with guards that count its steps, time, call depth and the memory it
// keeps and holds, and Render stops a render that goes over its Limits
// with an error for that request instead of a crash of the server
// (guard.go).
//
// It must never log or keep message content, and it must never tokenize:
// the tokenizer belongs to the caller.
package chat
