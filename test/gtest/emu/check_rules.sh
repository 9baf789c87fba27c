#!/bin/sh
# usage: check_rules.sh <gtest-xml-output> [rules.tsv]
# Fails if a test listed in the rule table is missing from the run, was skipped or failed.
set -u
xml=${1:?usage: check_rules.sh <gtest-xml-output> [rules.tsv]}
rules=${2:-$(dirname "$0")/rules.tsv}
[ -r "$xml" ] || { echo "check_rules: cannot read $xml" >&2; exit 2; }
[ -r "$rules" ] || { echo "check_rules: cannot read $rules" >&2; exit 2; }
bad=0
n=0
while IFS='	' read -r id text test; do
    case "$id" in ''|'#'*) continue ;; esac
    n=$((n + 1))
    if [ -z "${test:-}" ]; then
        echo "check_rules: $id has no test" >&2; bad=1; continue
    fi
    suite=${test%%.*}
    name=${test#*.}
    # the <testcase> element of this test, on one line as gtest writes it
    line=$(awk -v s="$suite" -v t="$name" '
        /<testsuite / { cur = ""; if (match($0, /name="[^"]*"/)) cur = substr($0, RSTART + 6, RLENGTH - 7) }
        /<testcase / && cur == s && index($0, "name=\"" t "\"") { print; exit }' "$xml")
    if [ -z "$line" ]; then
        echo "check_rules: $id: $test missing from $xml" >&2; bad=1; continue
    fi
    case "$line" in
        *'status="run"'*'result="completed"'*|*'result="completed"'*'status="run"'*) ;;
        *'status="run"'*) case "$line" in *result=*) echo "check_rules: $id: $test did not complete" >&2; bad=1; continue ;; esac ;;
        *) echo "check_rules: $id: $test did not run" >&2; bad=1; continue ;;
    esac
    # a failing test has a <failure> child right after its <testcase ...> line
    if awk -v s="$suite" -v t="$name" '
        /<testsuite / { cur = ""; if (match($0, /name="[^"]*"/)) cur = substr($0, RSTART + 6, RLENGTH - 7) }
        /<testcase / { inside = (cur == s && index($0, "name=\"" t "\"")); if (inside && $0 ~ /\/>[ \t]*$/) inside = 0; next }
        /<\/testcase>/ { inside = 0 }
        inside && /<failure/ { found = 1 }
        END { exit found ? 0 : 1 }' "$xml"; then
        echo "check_rules: $id: $test failed" >&2; bad=1
    fi
done < "$rules"
[ $bad -eq 0 ] && echo "check_rules: all $n rules proven by passing tests"
exit $bad
