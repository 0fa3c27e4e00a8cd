// Package peer runs llama.cpp as a reference peer, so that tests and
// `bulkhead bench` can compare Bulkhead's output and speed with it.
//
// It owns the Go side of tools/node/llamacpp.mjs: finding the script and its
// node-llama-cpp install, running one command as a child `node` process, and
// decoding the single JSON document the script prints. llama.cpp itself runs
// in that child process, from the prebuilt CPU binary that the npm package
// @node-llama-cpp/linux-x64 ships.
//
// It must never:
//   - be imported by the serving path: it exists for tests and benchmarks,
//     and needs node and an npm install that a deployment will not have;
//   - download or build anything: the script asks node-llama-cpp for the
//     prebuilt binary only, and a missing install is an error from Available,
//     not a fetch;
//   - hide why the peer failed: errors carry the exit status and the tail of
//     node's stderr, where the script writes llama.cpp's own message last.
//
// The script is found at <repo root>/tools/node/llamacpp.mjs, where the repo
// root is the nearest directory above the working directory holding go.mod;
// the environment variable BULKHEAD_NODE_PEER_DIR names another directory
// holding llamacpp.mjs and its node_modules.
package peer
