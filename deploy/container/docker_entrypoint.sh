#!/bin/sh
# The stand-in Deno image's entrypoint, run by tini as the official image's is: a first argument
# that is an option or one of Deno 2.9's subcommands runs deno with the arguments (so
# `CMD ["task", "start"]` is `deno task start`); anything else runs as the command it names.
set -e
case "$1" in
  -*) exec deno "$@" ;;
  add | approve-scripts | audit | bench | bump-version | bundle | cache | check | ci | clean | \
    compile | completions | coverage | create | deploy | desktop | doc | eval | fmt | help | info | \
    init | install | jupyter | link | lint | list | lsp | outdated | pack | publish | remove | repl | \
    run | sandbox | serve | task | test | transpile | types | uninstall | unlink | update | \
    upgrade | vendor | watch | why | x)
    exec deno "$@" ;;
esac
exec "$@"
