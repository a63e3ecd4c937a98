# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# fish completion for llmprofctl. The commands and each one's options come from llmprofctl's
# own --help, so they cannot drift from the binary; --pid offers the pids the daemon tracks
# (asked of the socket the command line names), top's --sort and --columns their columns.

# The command of the line so far, and the --socket it names.
function __llmprofctl_scan
    set -l words (commandline -opc)
    set -l skip 0
    set -l cmd
    set -l sock
    for i in (seq 2 (count $words))
        if test $skip = 1
            set skip 0
            continue
        end
        switch $words[$i]
            case --socket
                set skip 1
                test $i -lt (count $words); and set sock --socket $words[(math $i + 1)]
            case --timeout
                set skip 1
            case '-*'
            case '*'
                test -z "$cmd"; and set cmd $words[$i]
        end
    end
    echo "$cmd"
    printf '%s\n' $sock
end

function __llmprofctl_complete
    set -l words (commandline -opc)
    set -l scan (__llmprofctl_scan)
    set -l cmd $scan[1]
    set -l sock $scan[2..-1]
    set -l prev $words[-1]
    switch $prev
        case --socket
            __fish_complete_path (commandline -ct)
            return
        case --pid -p
            $words[1] $sock list --pids 2>/dev/null
            return
        case --timeout --delay -d --iterations -n --seconds --threshold -t --top
            return
    end
    if test "$cmd" = record; and contains -- $prev --format -f
        printf '%s\n' perfetto json
        return
    else if test "$cmd" = record; and contains -- $prev --output -o
        __fish_complete_path (commandline -ct)
        return
    else if test "$cmd" = flame; and contains -- $prev --by -b
        printf '%s\n' op_group
        return
    else if test "$cmd" = flame; and contains -- $prev --phase -P
        printf '%s\n' prompt generation outside
        return
    else if test "$cmd" = flame; and contains -- $prev --output -o
        __fish_complete_path (commandline -ct)
        return
    else if test "$cmd" = ops; and contains -- $prev --by -b
        printf '%s\n' op shape layer block node
        return
    else if test "$cmd" = ops; and contains -- $prev --sort -s
        printf '%s\n' cpu max time-per-byte
        return
    else if test "$cmd" = top; and contains -- $prev --sort -s
        printf '%s\n' PID COMMAND THR CPU% TOK/S MS50 MS99 MM% SPIN% FTX/S FTX99 RQ99 MAJ/S WTOK/S MODEL WORKLOAD REQ/S TTFT99 TPOT99 OCC
        return
    else if test "$cmd" = top; and contains -- $prev --columns -o
        printf '%s\n' pid comm thr cpu toks wtoks ms50 ms99 mm spin ftxs ftx99 rq99 majs model workload reqs ttft99 tpot99 occ engine
        return
    end
    if test -z "$cmd"
        $words[1] --help 2>/dev/null | sed -nE '/^Commands:/,/^$/s/^  ([a-z]+) +(.*)$/\1\t\2/p'
        printf '%s\n' --socket\t"llmprofd's socket" --timeout\t"seconds for each request" --help --version
        return
    end
    test "$cmd" = diff; and __fish_complete_path (commandline -ct)
    $words[1] $cmd --help 2>/dev/null | sed -nE 's/^ +(-[A-Za-z], )?(--[a-z-]+)( [A-Z]+)? +(.*)$/\2\t\4/p'
    printf '%s\n' --socket\t"llmprofd's socket" --timeout\t"seconds for each request" --help
end

complete -c llmprofctl -f -a '(__llmprofctl_complete)'
