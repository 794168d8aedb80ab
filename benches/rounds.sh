# Shared by the load scripts, which run each case in rounds alternating stackhook and
# the floor. Sourced, not run.

# The median of the numbers given as arguments.
median() {
  printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {
    if (NR % 2) print v[(NR+1)/2]; else printf "%.3f\n", (v[NR/2] + v[NR/2+1]) / 2 }'
}

# "M % (r1 r2 ...)": the median of the rounds' stackhook/floor ratios, then each round's,
# in per cent.
vs_floor() {
  awk -v m="$(median "$@")" 'BEGIN { printf "%.0f %% (", m * 100 }'
  printf '%s ' "$@" | awk '{for (i=1;i<=NF;i++) printf "%s%.0f", (i>1?" ":""), $i*100}'
  printf ')'
}
