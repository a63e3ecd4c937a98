# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# bash completion for llmprofctl: commands, their options, column names for --sort, and
# for --pid the pids the daemon tracks (asked of the same socket as the command line).
_llmprofctl() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
	local common="--socket --timeout --help" cmd="" i opts
	local -a sock=()

	for ((i = 1; i < COMP_CWORD; i++)); do
		case ${COMP_WORDS[i]} in
		--socket | --timeout)
			[[ ${COMP_WORDS[i]} == --socket ]] && sock=(--socket "${COMP_WORDS[i + 1]}")
			((i++))
			;;
		-*) ;;
		*) [[ -z $cmd ]] && cmd=${COMP_WORDS[i]} ;;
		esac
	done
	case $prev in
	--socket)
		COMPREPLY=($(compgen -f -- "$cur"))
		return
		;;
	--pid | -p)
		COMPREPLY=($(compgen -W "$("${COMP_WORDS[0]}" "${sock[@]}" list --pids 2>/dev/null)" -- "$cur"))
		return
		;;
	--sort | -s)
		if [[ $cmd == ops ]]; then
			COMPREPLY=($(compgen -W "cpu max time-per-byte" -- "$cur"))
			return
		fi
		COMPREPLY=($(compgen -W "PID COMMAND THR CPU% TOK/S MS50 MS99 MM% SPIN% FTX/S FTX99 RQ99 MAJ/S WTOK/S MODEL WORKLOAD REQ/S TTFT99 TPOT99 OCC" -- "$cur"))
		return
		;;
	--columns | -o)
		COMPREPLY=($(compgen -W "pid comm thr cpu toks wtoks ms50 ms99 mm spin ftxs ftx99 rq99 majs model workload reqs ttft99 tpot99 occ engine" -- "${cur##*,}"))
		return
		;;
	--format)
		COMPREPLY=($(compgen -W "perfetto json" -- "$cur"))
		return
		;;
	--by | -b)
		if [[ $cmd == flame ]]; then
			COMPREPLY=($(compgen -W "op_group" -- "$cur"))
			return
		fi
		COMPREPLY=($(compgen -W "op shape layer block node" -- "$cur"))
		return
		;;
	--phase | -P)
		COMPREPLY=($(compgen -W "prompt generation outside" -- "$cur"))
		return
		;;
	--output)
		COMPREPLY=($(compgen -f -- "$cur"))
		return
		;;
	--timeout | --delay | -d | --iterations | -n | --last | --seconds | --threshold | -t | --top)
		return
		;;
	esac
	case $cmd in
	"") opts="top dump ops flame doctor diff requests list status reset precise record help $common --version" ;;
	top) opts="--delay --batch --json --iterations --sort --columns --all --threads --ops --pid $common" ;;
	dump) opts="--pid --json --fine $common" ;;
	list) opts="--json --pids $common" ;;
	status) opts="--json $common" ;;
	reset) opts="--pid $common" ;;
	requests) opts="--pid --last --json $common" ;;
	ops) opts="--pid --by --sort --top --json $common" ;;
	flame) opts="--pid --seconds --output --by --phase --top $common" ;;
	precise) opts="--pid --seconds --no-wait --off --json $common" ;;
	record) opts="--pid --seconds --output --no-ops --format --summary --json $common" ;;
	doctor) opts="--pid --all --json --measure-bandwidth $common" ;;
	diff)
		# two saved reports, then options
		COMPREPLY=($(compgen -f -- "$cur") $(compgen -W "--threshold --json $common" -- "$cur"))
		return
		;;
	help) opts="top dump ops flame doctor diff requests list status reset precise record" ;;
	esac
	COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}
complete -F _llmprofctl llmprofctl
