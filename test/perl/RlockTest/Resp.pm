
=pod

=head1 NAME

RlockTest::Resp - a blocking RESP2 client for rlock's tests and
benchmarks: commands, replies, and published messages with a timeout

=cut

package RlockTest::Resp;

use strict;
use warnings;

use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(time);

sub connect
{
	my ($class, $port) = @_;
	my $sock = IO::Socket::INET->new(
		PeerAddr => '127.0.0.1',
		PeerPort => $port,
		Proto => 'tcp',
		Timeout => 5) or die "cannot connect to Redis on port $port: $!";
	$sock->autoflush(1);
	return bless { sock => $sock, buf => '' }, $class;
}

sub send_cmd
{
	my ($self, @args) = @_;
	my $out = '*' . scalar(@args) . "\r\n";
	$out .= '$' . length($_) . "\r\n$_\r\n" for @args;
	$self->{sock}->print($out) or die "write to Redis failed: $!";
}

sub call
{
	my ($self, @args) = @_;
	$self->send_cmd(@args);
	return $self->read_reply(10);
}

# A command and its reply as Redis sent it, byte for byte.
sub call_raw
{
	my ($self, @args) = @_;
	$self->send_cmd(@args);
	$self->{recorded} = $self->{buf};
	eval { $self->read_reply(10) };
	my $err = $@;
	my $all = delete $self->{recorded};
	die $err if $err;
	return substr($all, 0, length($all) - length($self->{buf}));
}

# Read bytes until the buffer holds $n of them or the deadline passes.
sub _fill
{
	my ($self, $n, $deadline) = @_;
	my $sel = IO::Select->new($self->{sock});
	while (length($self->{buf}) < $n)
	{
		my $left = $deadline - time;
		return 0 if $left <= 0;
		# a signal (SIGCHLD when a server of the test is stopped with
		# SIGSTOP) ends select early: only a real wait's end counts
		$! = 0;
		unless ($sel->can_read($left))
		{
			next if $!{EINTR};
			return 0;
		}
		my $got = sysread($self->{sock}, $self->{buf}, 65536,
			length($self->{buf}));
		die "Redis closed the connection" unless $got;
		$self->{recorded} .= substr($self->{buf}, -$got)
		  if defined $self->{recorded};
	}
	return 1;
}

sub _line
{
	my ($self, $deadline) = @_;
	my $i;
	while (($i = index($self->{buf}, "\r\n")) < 0)
	{
		return undef unless $self->_fill(length($self->{buf}) + 1, $deadline);
	}
	my $line = substr($self->{buf}, 0, $i);
	substr($self->{buf}, 0, $i + 2) = '';
	return $line;
}

# One reply: a string, a number, undef for nil, an array reference, or a
# hash { error => text }.  Returns the string 'TIMEOUT' (in list context:
# (undef, 1)) when nothing complete arrives within $timeout seconds.
sub read_reply
{
	my ($self, $timeout) = @_;
	my $deadline = time + ($timeout // 10);
	my $line = $self->_line($deadline);
	die "no reply from Redis within $timeout s\n" unless defined $line;
	my ($type, $rest) = (substr($line, 0, 1), substr($line, 1));
	return $rest if $type eq '+';
	return { error => $rest } if $type eq '-';
	return $rest + 0 if $type eq ':';
	if ($type eq '$')
	{
		return undef if $rest < 0;
		die "short bulk reply\n" unless $self->_fill($rest + 2, $deadline);
		my $s = substr($self->{buf}, 0, $rest);
		substr($self->{buf}, 0, $rest + 2) = '';
		return $s;
	}
	if ($type eq '*')
	{
		return undef if $rest < 0;
		return [ map { $self->read_reply($deadline - time) } 1 .. $rest ];
	}
	die "unexpected reply line: $line\n";
}

# RESP of a Perl value, for the replies a test makes a relay tell: array
# refs are arrays, \N integers, undef a null, anything else a bulk string.
sub encode
{
	my ($v) = @_;
	return "\$-1\r\n" unless defined $v;
	return '*' . scalar(@$v) . "\r\n" . join('', map { encode($_) } @$v)
	  if ref $v eq 'ARRAY';
	return ":$$v\r\n" if ref $v eq 'SCALAR';
	return '$' . length($v) . "\r\n$v\r\n";
}

# Every reply that arrives until none has for $quiet seconds (for a
# MONITOR connection: one line per command Redis ran).
sub drain
{
	my ($self, $quiet) = @_;
	my @replies;
	while (1)
	{
		my $reply = eval { $self->read_reply($quiet) };
		last unless defined $reply;
		push @replies, $reply;
	}
	return @replies;
}

# Wait up to $timeout seconds for a published message; returns
# [channel, payload] or undef.
sub next_message
{
	my ($self, $timeout) = @_;
	my $deadline = time + $timeout;
	while (time < $deadline)
	{
		my $reply = eval { $self->read_reply($deadline - time) };
		return undef unless defined $reply;
		return [ $reply->[1], $reply->[2] ]
		  if ref $reply eq 'ARRAY' && $reply->[0] eq 'message';
	}
	return undef;
}

1;
