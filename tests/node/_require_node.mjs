// npm test's first step: the Node that runs npm must be one the service runs on (24.7 or later, as
// lib/node/main.ts requires), or npm test says so in one sentence and exits 1. JavaScript, not
// TypeScript: an older Node (the machine's own may be 20) cannot load the tests' TypeScript at all.
import process from "node:process";

const [major = 0, minor = 0] = process.versions.node.split(".").map(Number);
if (major < 24 || (major === 24 && minor < 7)) {
  process.stderr.write(
    `npm test needs Node 24.7 or later, and this is Node ${process.versions.node}: run it with a newer Node first on PATH, such as npx -y -p node@24 -- npm test\n`,
  );
  process.exit(1);
}
