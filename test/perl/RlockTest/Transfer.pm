# What the tests of hand-offs by transfer (074, 075) ask of a node and of
# Redis: sessions, the line of a key, the scripts MONITOR saw run on a
# key, and a chain of sections handed from one session to the next.
package RlockTest::Transfer;

use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use Exporter 'import';
use RlockTest;

our @EXPORT_OK = qw(plain_shas session waiting line_up scripts_on chain);

# The SHA1 of each of the plain kind's scripts named
sub plain_shas
{
	return map {
		$_ => sha1_hex(RlockTest::script_text(
				($ENV{TESTDIR} // '.') . "/src/kinds/plain/$_.lua"))
	} @_;
}

# A session of $node that goes on after errors, with SQLSTATEs in them
sub session
{
	my ($node) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('\set VERBOSITY verbose');
	return $s;
}

# How many sessions of $node wait for $key
sub waiting
{
	my ($node, $key) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM rlock_locks WHERE key = '$key' AND state = 'waiting'");
}

# The first session takes $key in a transaction; each other one asks for
# it with $ask (default: rlock_try in a transaction, waiting 30 s) and
# queues, in their order.  Returns once they all wait.
sub line_up
{
	my ($node, $key, $ask, $holder, @waiters) = @_;
	$ask //= "SELECT rlock_try('$key', '30 s')";
	$holder->query_safe('BEGIN');
	$holder->query_safe("SELECT rlock_try('$key')") eq 't'
	  or die "$key is not free";
	for my $i (1 .. @waiters)
	{
		my $w = $waiters[ $i - 1 ];
		$w->query_safe('BEGIN') unless $ask =~ /session/;
		RlockTest::send_query($w, "$ask;");
		RlockTest::wait_until(sub { waiting($node, $key) == $i }, 10)
		  or die "waiter $i did not queue for $key";
	}
}

# The scripts Redis ran on $key among MONITOR lines, in order, by their
# names in %$sha (plain_shas), and a PUBLISH of an unlock message on the
# key's channel (by a script) as publish
sub scripts_on
{
	my ($sha, $key, @lines) = @_;
	my %name = reverse %$sha;
	my @seen;
	for my $line (@lines)
	{
		next unless $line =~ /^[\d.]+ \[\d+ ([\d.:a-z]+)\] (.*)$/;
		my ($client, $rest) = ($1, $2);
		my @args = $rest =~ /"((?:[^"\\]|\\.)*)"/g;
		if ($client eq 'lua' && lc($args[0]) eq 'publish'
			&& $args[1] eq "redisson_lock__channel:{$key}")
		{
			push @seen, 'publish';
		}
		elsif ($client ne 'lua' && $args[0] eq 'EVALSHA'
			&& ($args[3] // '') eq $key && $name{ $args[1] })
		{
			push @seen, $name{ $args[1] };
		}
	}
	return join(' ', @seen);
}

# $total sections on $key, the table chain's counter incremented in each:
# the holder of the line @line (line_up) commits, the next is granted, and
# the holder queues again while fewer than $total are promised (granted
# or waiting).  Returns what the commits wrote on stderr ('' if nothing).
sub chain
{
	my ($node, $key, $total, @line) = @_;
	my $failed = '';
	my $promised = @line;
	while (@line)
	{
		my $h = shift @line;
		$h->query_safe('UPDATE chain SET n = n + 1');
		$h->query('COMMIT');
		$failed .= $h->{stderr};
		$h->{stderr} = '';
		if (@line)
		{
			my ($got, $e) = RlockTest::collect($line[0]);
			die "the next was not granted: $e" unless $got eq 't';
		}
		next if $promised == $total;
		$h->query_safe('BEGIN');
		RlockTest::send_query($h, "SELECT rlock_try('$key', '30 s');");
		RlockTest::wait_until(sub { waiting($node, $key) == @line }, 10)
		  or die 'the holder did not queue again';
		push @line, $h;
		$promised++;
	}
	return $failed;
}

1;
