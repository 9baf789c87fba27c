#!/usr/bin/env bash
#
# check_layers.sh [-I DIR]... LAYER...: fails when a file includes a header
# of a layer above its own. See LICENSE for terms.
#
# Run from the top of the source tree (make check-layers). LAYERs are listed
# lowest first; a layer is one folder or several joined by ':' (a file
# belongs to the layer of the longest folder that holds it). An include is
# resolved as the compiler does: "x" next to the including file first, then
# in the -I folders in order; <x> in the -I folders only. Headers found
# nowhere in the tree (UCX's, rdma-core's, the system's) belong to no layer.
set -u

idirs=()
while [ $# -gt 0 ]; do
    case "$1" in
    -I)  idirs+=("${2:?check_layers: -I needs a folder}"); shift 2 ;;
    -I*) idirs+=("${1#-I}"); shift ;;
    *)   break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: check_layers.sh [-I DIR]... LAYER..." >&2; exit 2; }

# folder -> rank, lowest layer 0
declare -A rank=()
folders=()
r=0
for layer in "$@"; do
    IFS=: read -r -a parts <<< "$layer"
    for f in "${parts[@]}"; do
        f=${f%/}
        [ -d "$f" ] || { echo "check_layers: no folder $f" >&2; exit 2; }
        rank[$f]=$r
        folders+=("$f")
    done
    r=$((r + 1))
done

# layer_of PATH: the folder of the layer PATH is in (longest match), or "".
layer_of() {
    local p=$1 f best=
    for f in "${folders[@]}"; do
        case "$p" in
        "$f"/*) [ ${#f} -gt ${#best} ] && best=$f ;;
        esac
    done
    echo "$best"
}

# resolve DIR NAME QUOTED: the file an include names, relative to the top.
resolve() {
    local dir=$1 name=$2 quoted=$3 d
    if [ "$quoted" = 1 ] && [ -f "$dir/$name" ]; then
        realpath -m --relative-to=. "$dir/$name"
        return
    fi
    for d in "${idirs[@]}"; do
        if [ -f "$d/$name" ]; then
            realpath -m --relative-to=. "$d/$name"
            return
        fi
    done
}

bad=0
files=0
while IFS= read -r file; do
    own=$(layer_of "$file")
    [ -n "$own" ] || continue
    files=$((files + 1))
    while IFS=' ' read -r quoted name; do
        target=$(resolve "$(dirname "$file")" "$name" "$quoted")
        [ -n "$target" ] || continue
        tl=$(layer_of "$target")
        [ -n "$tl" ] || continue
        if [ "${rank[$tl]}" -gt "${rank[$own]}" ]; then
            echo "layer violation: $file includes $name ($target: layer $tl, above $own)"
            bad=1
        fi
    done < <(sed -n -e 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/1 \1/p' \
                    -e 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*<\([^>]*\)>.*/0 \1/p' "$file")
done < <(find "${folders[@]}" -type f \( -name '*.[ch]' -o -name '*.inl' -o -name '*.cc' \) | LC_ALL=C sort -u)

if [ $bad -ne 0 ]; then
    exit 1
fi
echo "layer check: $files files, none includes a header of a layer above its own ($*)"
