# A worker that ends at an unlucky moment leaves nothing stranded.  gdb
# stops the worker at a chosen function and makes it exit there, as an
# error (out of memory, say) would: the postmaster starts a new worker,
# which must finish what the old one had taken on.
#
# - a release taken off the ring: the worker exits at the first thing it
#   does with the entry that can fail (noting its owner, which
#   allocates); the next worker sends the release, and the lock is gone
#   from Redis long before its lease would end.
use strict;
use warnings;

use IPC::Run ();
use PostgreSQL::Test::Utils;
use Test::More;
use RlockTest;
use RlockTest::Redis;

plan skip_all => 'worker exits do not depend on TLS: the plain round runs this'
  if RlockTest::TLS::everywhere();

my $redis = RlockTest::Redis->start;
my $node = RlockTest::node('faults', $redis);

# Make the worker exit (proc_exit(1): its exit callbacks run, and the
# postmaster restarts it as after an error) the first time it enters
# $function.  Returns the gdb harness; it ends once the worker has.
sub exit_at
{
	my ($pid, $function) = @_;
	my $out = '';
	my $h = IPC::Run::start(
		[ 'gdb', '-p', $pid, '-batch', '-nx',
		  '-ex', 'set confirm off',
		  '-ex', "break $function",
		  '-ex', 'continue',
		  '-ex', 'call (void) proc_exit(1)' ],
		'<', \undef, '>&', \$out);
	# gdb has attached once the worker is stopped at least once (ptrace
	# stops it); it runs on after "continue"
	ok(RlockTest::wait_until(
			sub { eval { $h->pump_nb }; $out =~ /Breakpoint 1 at/ }, 30),
		"gdb set a breakpoint at $function in the worker")
	  or diag($out);
	return ($h, \$out);
}

my $s = $node->background_psql('postgres', on_error_stop => 0);
is($s->query_safe("SELECT rlock_session_try('strand:k')"), 't', 'a session holds a lock');
my $old = RlockTest::worker_pid($node);
my ($gdb, $out) = exit_at($old, 'rlock_owners_note');
is($s->query("SELECT rlock_session_release('strand:k')"), 't',
	'the release call is answered');
is($s->{stderr}, '', 'without an error');
ok(RlockTest::wait_for_new_worker($node, $old, 30),
	'the worker exited in the middle of the release, and a new one runs')
  or diag($$out);
$gdb->finish;
# (an address first where rlock was built without debugging symbols)
like($$out, qr/Breakpoint 1, (?:0x[0-9a-f]+ in )?rlock_owners_note/,
	'it stopped where it was told');
ok(RlockTest::wait_until(sub { $redis->cmd('EXISTS', 'strand:k') == 0 }, 10),
	'the new worker sent the release: the lock is gone well before its 30 s lease');
is($s->query_safe("SELECT rlock_session_try('strand:k')"), 't', 'and can be taken again');
$s->query_safe("SELECT rlock_session_release('strand:k')");
$s->quit;

$node->stop;
$redis->stop;
done_testing();
